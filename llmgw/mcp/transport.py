"""/mcp on the client port: MCP's streamable HTTP transport, JSON-RPC 2.0 over POST.

Spoken here rather than through the SDK's server, which is built on
another framework and would put a second HTTP stack in front of the
gateway. What a client may send: initialize, notifications/initialized
(any notification is taken with 202), ping, tools/list, tools/call. The
answer is JSON, or an event stream when the client takes one and asked for
progress (`_meta.progressToken`), so a server's progress reaches it. The
caller authenticates with its llmgw API key, through the key cache /v1
uses: a call reads nothing from the store.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson
from aiohttp import web

from llmgw import __version__
from llmgw.account import Principal, key_flaw
from llmgw.mcp.gateway import Gateway, UnknownTool
from llmgw.store import StoreError

GATEWAY: web.AppKey[Gateway] = web.AppKey("mcp_gateway")
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MAX_BODY = 4 * 1024 * 1024
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
UNAUTHORIZED = -32001


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json", headers=headers)


# `ident` in each answer: the request's id as the client sent it, given back unread (JSON-RPC 2.0).
def _error(ident: object, code: int, message: str, status: int = 200) -> web.Response:
    return _json({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}, status)


def _result(ident: object, result: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return _json({"jsonrpc": "2.0", "id": ident, "result": result}, headers=headers)


async def post(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    principal = await _principal(request, gateway)
    if isinstance(principal, str):
        return _error(None, UNAUTHORIZED, principal, 401)
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(None, INVALID_REQUEST, f"the message is larger than {MAX_BODY // (1024 * 1024)} MB", 413)
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return _error(None, INVALID_REQUEST, f"the message is larger than {MAX_BODY // (1024 * 1024)} MB", 413)
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return _error(None, PARSE_ERROR, f"the body is not JSON: {e}", 400)
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "send one JSON-RPC message a request; batches are not taken", 400)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(None, INVALID_REQUEST, 'the body is not a JSON-RPC 2.0 message ({"jsonrpc": "2.0", ...})', 400)
    method, ident = message.get("method"), message.get("id")
    if method is None:
        return web.Response(status=202)  # a client's answer to a request of ours: there are none to answer
    if not isinstance(method, str):
        return _error(ident, INVALID_REQUEST, "method must be text", 400)
    if "id" not in message:
        return web.Response(status=202)  # notifications/initialized, cancelled, …: taken, nothing to say
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(ident, INVALID_PARAMS, "params must be an object")
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[1]
        return _result(ident, {
            "protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "llmgw", "version": __version__},
            "instructions": "The company's tools, named server.tool, as your llmgw key is granted them."},
            headers={"Mcp-Session-Id": secrets.token_hex(16)})
    if method == "ping":
        return _result(ident, {})
    if method == "tools/list":
        return _result(ident, {"tools": await gateway.tools_for(principal)})
    if method == "tools/call":
        return await _call(request, gateway, principal, ident, params)
    return _error(ident, METHOD_NOT_FOUND, f"/mcp does not answer {method[:100]}; it serves tools "
                                           "(tools/list, tools/call)")


async def _call(request: web.Request, gateway: Gateway, principal: Principal, ident: object,
                params: dict[str, Any]) -> web.StreamResponse:
    name, arguments = params.get("name"), params.get("arguments") or {}
    if not isinstance(name, str) or not name:
        return _error(ident, INVALID_PARAMS, "tools/call needs the tool's name (params.name)")
    if not isinstance(arguments, dict):
        return _error(ident, INVALID_PARAMS, "a tool's arguments are an object (params.arguments)")
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    streams = token is not None and "text/event-stream" in request.headers.get("Accept", "")
    if not streams:
        try:
            result = await gateway.call(principal, name, arguments, None)
        except UnknownTool:
            return _unknown(ident, name)
        return _result(ident, result)
    # Progress is passed on as it comes: the answer is an event stream, opened at the first event.
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})

    async def send(event: dict[str, Any]) -> None:
        if not response.prepared:
            await response.prepare(request)
        await response.write(b"data: " + orjson.dumps(event) + b"\n\n")

    async def progress(given: dict[str, Any]) -> None:
        try:
            await send({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {**{k: v for k, v in given.items() if k in ("progress", "total", "message")},
                                   "progressToken": token}})
        except ConnectionError:
            pass  # the caller went away: the call is cancelled with its handler, not failed by the server

    try:
        result = await gateway.call(principal, name, arguments, progress)
    except UnknownTool:
        if response.prepared:
            await send({"jsonrpc": "2.0", "id": ident, "error": {"code": INVALID_PARAMS, "message": _no_tool(name)}})
            await response.write_eof()
            return response
        return _unknown(ident, name)
    await send({"jsonrpc": "2.0", "id": ident, "result": result})
    await response.write_eof()
    return response


def _no_tool(name: str) -> str:
    return f"there is no tool {name[:200]} this key may call; tools/list names the ones it may"


def _unknown(ident: object, name: str) -> web.Response:
    return _error(ident, INVALID_PARAMS, _no_tool(name))


async def _principal(request: web.Request, gateway: Gateway) -> Principal | str:
    """The caller, or the sentence that refuses it."""
    given = request.headers.get("Authorization", "")
    secret = given[7:].strip() if given[:7].lower() == "bearer " else ""
    if not secret:
        return "no API key: send your llmgw API key as Authorization: Bearer sk-llmgw-…"
    flaw = key_flaw(secret)
    if flaw is not None:
        return flaw
    try:
        principal = await gateway.plane.keys.lookup(secret)
    except StoreError:
        return "the store is not answering and this key is not known here yet; try again shortly"
    if principal is None:
        return "unknown API key"
    refusal = principal.refusal(time.time())
    if refusal:
        return refusal
    return principal


async def other(request: web.Request) -> web.Response:
    if request.method == "DELETE":
        return web.Response(status=204)  # a session ends: nothing is kept for one
    return _error(None, INVALID_REQUEST, f"/mcp takes POST (JSON-RPC); {request.method} is not served here", 405)
