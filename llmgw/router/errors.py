"""Refusals on /v1 in OpenAI's error shape, each a sentence a person can act on."""

from __future__ import annotations

import orjson
from aiohttp import web

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict:
    """OpenAI's error object: the body of a refusal, and the event that ends a stream refused after it began."""
    return {"error": {"message": message, "type": _TYPES.get(status, "api_error"), "param": param, "code": code}}


def api_error(status: int, message: str, code: str, *, param: str | None = None,
              headers: dict[str, str] | None = None) -> web.Response:
    body = error_body(status, message, code, param)
    return web.Response(status=status, body=orjson.dumps(body),
                        content_type="application/json", headers=headers)
