"""Refusals on /v1 in OpenAI's error shape, each a sentence a person can act on."""

from __future__ import annotations

import orjson
from aiohttp import web

from llmgw.router.wire import JSON

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def error_body(status: int, message: str, code: str, param: str | None = None) -> JSON:
    """OpenAI's error object: the body of a refusal, and the event that ends a stream refused after it began."""
    return {"error": {"message": message, "type": _TYPES.get(status, "api_error"), "param": param, "code": code}}


def api_error(status: int, message: str, code: str, *, param: str | None = None,
              headers: dict[str, str] | None = None) -> web.Response:
    body = error_body(status, message, code, param)
    return web.Response(status=status, body=orjson.dumps(body),
                        content_type="application/json", headers=headers)


def speaks_anthropic(path: str) -> bool:
    """Whether a refusal on `path` goes out in Anthropic's shape.

    /v1/messages is Anthropic's endpoint. So is any /v1 path about messages
    that does not exist here: /v1/v1/messages is what the Anthropic SDK calls
    when given a base URL ending in /v1 (it adds /v1 itself), and
    /v1/messages/count_tokens is one of its calls this gateway lacks. Its SDK
    reads only its own shape, so the hint in the 404 reached nobody.
    """
    if path == "/v1/messages":
        return True
    return path.startswith("/v1/") and (path.endswith("/messages") or "/messages/" in path)


def in_anthropic_shape(response: web.StreamResponse) -> web.StreamResponse:
    """An OpenAI-shaped refusal made before /v1/messages' handler ran, in Anthropic's shape.

    The key check, the connection and body limits and the method check
    answer every /v1 route the same way, before anything knows the route's
    shape; the Anthropic SDK reads only its own, so it showed "no API key"
    as an unreadable error. Their sentence, status and headers are kept.
    """
    if response.status < 400 or response.prepared or not isinstance(response, web.Response):
        return response
    body = response.body
    if not isinstance(body, (bytes, bytearray)):
        return response  # no body, or a payload to stream: not a refusal's JSON
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return response
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict) or doc.get("type") == "error" or not isinstance(error.get("message"), str):
        return response
    from llmgw.router.translate.anthropic_answer import anthropic_error

    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.Response(status=response.status, body=orjson.dumps(anthropic_error(response.status, error["message"])),
                        content_type="application/json", headers=headers)

