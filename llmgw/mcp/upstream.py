"""The servers /mcp relays to: a company's, over MCP's streamable HTTP transport, or this cluster's own.

An `Upstream` lists its tools and calls one. The HTTP one speaks the
transport itself (aiohttp, as every client in llmgw): `initialize`, then
`notifications/initialized`, then the request, each a POST answered with
JSON or with an event stream that may carry progress before the answer.
The session the server gives (Mcp-Session-Id) is kept and used again; one
the server has forgotten (404) is opened again once.

Bounds are the gateway's, not the server's: a call has the server's
timeout, and an answer larger than MAX_ANSWER is cut off and refused, so a
server cannot hold a control plane's memory or a caller's connection.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import aiohttp
import orjson

if TYPE_CHECKING:
    from llmgw.control import AdminClient
    from llmgw.mcp.cluster import ClusterTools
    from llmgw.mcp.plane import McpPlane

MAX_ANSWER = 4 * 1024 * 1024
PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "llmgw", "version": "1"}

Progress = Callable[[dict[str, Any]], Awaitable[None]]


# A worker process asks the main process for the cluster's own tools here (mcp/admin.py).
CLUSTER_TOOLS_PATH = "/api/v1/mcp/cluster-tools/"
MAIN_PROCESS_TIMEOUT = 30.0


class UpstreamError(Exception):
    """A server that could not be asked or answered wrongly, as a sentence naming the server, never a secret."""


async def every_tool(ask: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A server's whole tool list, page by page (`ask` sends one tools/list with its params)."""
    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):  # a server that pages forever is not followed forever
        result = await ask({"cursor": cursor} if cursor else {})
        tools += [t for t in result.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return tools


class Upstream(Protocol):
    async def list_tools(self) -> list[dict[str, Any]]: ...  # MCP tool descriptors, names as the server has them

    # An MCP CallToolResult as a dict; `progress` gets each progress notification's params.
    async def call_tool(self, name: str, arguments: dict[str, Any], progress: Progress | None = None,
                        caller: Mapping[str, str] | None = None) -> dict[str, Any]: ...


class HttpUpstream:
    """A company's MCP server at `url`, asked with `headers` (llmgw's credentials for it)."""

    def __init__(self, name: str, url: str, headers: Callable[[], Awaitable[dict[str, str]]],
                 session: aiohttp.ClientSession, timeout: float):
        self.name, self.url = name, url
        self._headers = headers
        self._session = session
        self._timeout = timeout
        self._mcp_session: str | None = None
        self._ids = itertools.count(1)

    async def list_tools(self) -> list[dict[str, Any]]:
        return await every_tool(lambda params: self._request("tools/list", params, None, {}))

    async def call_tool(self, name: str, arguments: dict[str, Any], progress: Progress | None = None,
                        caller: Mapping[str, str] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if progress is not None:
            params["_meta"] = {"progressToken": f"llmgw-{next(self._ids)}"}
        return await self._request("tools/call", params, progress, caller or {})

    async def _request(self, method: str, params: dict[str, Any], progress: Progress | None,
                       caller: Mapping[str, str]) -> dict[str, Any]:
        try:
            # One bound over the whole exchange, initialize included: the call's timeout.
            async with asyncio.timeout(self._timeout):
                for attempt in (1, 2):
                    if self._mcp_session is None:
                        await self._open(caller)
                    status, answer = await self._post({"jsonrpc": "2.0", "id": next(self._ids), "method": method,
                                                       "params": params}, progress, caller)
                    if status == 404 and attempt == 1 and self._mcp_session is not None:
                        self._mcp_session = None  # the server forgot the session: open another, once
                        continue
                    break
        except TimeoutError:
            raise UpstreamError(f"the MCP server {self.name} did not answer in {self._timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise UpstreamError(f"the MCP server {self.name} could not be reached: {_reason(e)}") from None
        except OSError as e:
            raise UpstreamError(f"the MCP server {self.name} could not be reached: {e}") from None
        except (ValueError, UnicodeError) as e:
            raise UpstreamError(f"the MCP server {self.name}'s answer could not be read: {str(e)[:200]}") from None
        if status >= 400 and answer is None:
            raise UpstreamError(f"the MCP server {self.name} answered {method} with HTTP {status}")
        if answer is None:
            raise UpstreamError(f"the MCP server {self.name} gave no answer to {method}")
        error = answer.get("error")
        if isinstance(error, dict):
            raise UpstreamError(f"the MCP server {self.name} refused {method}: {str(error.get('message'))[:300]}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"the MCP server {self.name} answered {method} without a result")
        return result

    async def _open(self, caller: Mapping[str, str]) -> None:
        status, answer = await self._post({
            "jsonrpc": "2.0", "id": next(self._ids), "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}},
            None, caller, opening=True)
        if answer is None or not isinstance(answer.get("result"), dict):
            why = (answer or {}).get("error", {}).get("message") if answer else f"HTTP {status}"
            raise UpstreamError(f"the MCP server {self.name} did not accept llmgw's initialize: {str(why)[:300]}")
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, None, caller)

    async def _post(self, message: dict[str, Any], progress: Progress | None, caller: Mapping[str, str],
                    opening: bool = False) -> tuple[int, dict[str, Any] | None]:
        headers = {**await self._headers(), **caller, "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self._mcp_session and not opening:
            headers["Mcp-Session-Id"] = self._mcp_session
        async with self._session.post(self.url, data=orjson.dumps(message), headers=headers,
                                      allow_redirects=False) as r:
            if opening and r.headers.get("Mcp-Session-Id"):
                self._mcp_session = r.headers["Mcp-Session-Id"]
            if "id" not in message or r.status == 202:
                return r.status, None
            kind = r.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if kind == "text/event-stream":
                return r.status, await self._events(r, message["id"], progress)
            body = await _bounded(r)
            try:
                answer = orjson.loads(body) if body else None
            except orjson.JSONDecodeError:
                answer = None
            return r.status, answer if isinstance(answer, dict) else None

    async def _events(self, r: aiohttp.ClientResponse, ident: int, progress: Progress | None) -> dict[str, Any] | None:
        read = 0
        data: list[bytes] = []
        async for line in r.content:
            read += len(line)
            if read > MAX_ANSWER:
                raise UpstreamError(f"the MCP server {self.name}'s answer is larger than "
                                    f"{MAX_ANSWER // (1024 * 1024)} MB")
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
                continue
            if line or not data:
                continue
            try:
                event = orjson.loads(b"\n".join(data))
            except orjson.JSONDecodeError:
                event = None
            data = []
            if not isinstance(event, dict):
                continue
            if event.get("id") == ident and ("result" in event or "error" in event):
                return event
            if event.get("method") == "notifications/progress" and progress is not None:
                await progress(event.get("params") or {})
        return None


async def _bounded(r: aiohttp.ClientResponse) -> bytes:
    chunks, read = [], 0
    async for chunk in r.content.iter_chunked(65536):
        read += len(chunk)
        if read > MAX_ANSWER:
            raise UpstreamError(f"an MCP server's answer is larger than {MAX_ANSWER // (1024 * 1024)} MB")
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(e: aiohttp.ClientError) -> str:
    text = str(e) or type(e).__name__
    return text[:300]


class InProcessUpstream:
    """This cluster's own read-only tools (`--url llmgw:admin`), answered in the control plane's process.

    A worker process serving /mcp (`workers` above 1) has the client port
    but not the cluster (agents, the lease, the catalog's state live in the
    main process), so it asks the main process over its admin API on
    loopback, with the admin token, the way `llmgw ctl` would.
    """

    def __init__(self, plane: McpPlane):
        from llmgw.control import ControlPlane
        from llmgw.mcp.cluster import ClusterTools

        # Exactly one of the two: the cluster here, or the way to the main process that has it.
        self._tools: ClusterTools | None = None
        self._main: AdminClient | None = None
        if isinstance(plane, ControlPlane):
            self._tools = ClusterTools(plane)
        else:  # a worker process
            from llmgw.control import AdminClient

            admin = plane.cfg.listen.admin
            host = "127.0.0.1" if admin.all_interfaces else admin.host
            self._main = AdminClient(f"[{host}]:{admin.port}" if ":" in host else f"{host}:{admin.port}",
                                     plane.cfg.admin_token_path, timeout=MAIN_PROCESS_TIMEOUT, via="mcp")

    async def list_tools(self) -> list[dict[str, Any]]:
        from llmgw.mcp.cluster import descriptors

        return descriptors()

    async def call_tool(self, name: str, arguments: dict[str, Any], progress: Progress | None = None,
                        caller: Mapping[str, str] | None = None) -> dict[str, Any]:
        if self._tools is not None:
            return await self._tools.call(name, arguments)
        assert self._main is not None
        from llmgw.control import AdminError

        try:
            answer = await asyncio.to_thread(self._main.call, "POST", CLUSTER_TOOLS_PATH + quote(name, safe=""),
                                             arguments)
        except AdminError as e:
            raise UpstreamError(f"the control plane's main process did not answer its cluster tool {name}: {e}") \
                from None
        if not isinstance(answer, dict):
            raise UpstreamError(f"the control plane's main process answered its cluster tool {name} with no result")
        return answer
