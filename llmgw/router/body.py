"""Reading a /v1 request's body: plain or compressed, bounded by router.max_body as inflated.

aiohttp's parser inflates `Content-Encoding: gzip` and `deflate` bodies
itself, so `request.content` yields the inflated bytes while
`request.content_length` is still the compressed length. Reading the
inflated stream by the compressed length cut every valid gzip body short
(a 400 for valid JSON), and a body that was not gzip at all surfaced as
aiohttp's payload error, a 500 with a traceback (issue 10, item 3). So a
compressed body is read to its end, counting what it inflates to: a small
body that inflates to gigabytes stops at the limit with a 413, the same as
a large plain one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from llmgw.router.call import Refuse

# What aiohttp inflates before the handler sees the body. It also knows br
# and zstd, but only with libraries this program does not install; without
# them aiohttp refuses such a body itself, with 400, before a handler runs.
INFLATED = frozenset({"gzip", "deflate"})
PLAIN = frozenset({"", "identity"})
CHUNK = 1 << 16
# orjson reads JSON nested 1,024 deep but writes only 254 levels, and the
# body is written again for the engine: a body nested 300 deep was read,
# then failed as a 500 on its way out (found by the fuzzer). Translation
# wraps a client's values a level or two deeper, so the bound leaves room.
MAX_DEPTH = 128


def _megabytes(limit: int) -> str:
    return f"{limit / (1024 * 1024):g} MB"


def _too_large(limit: int, inflated: bool = False) -> Refuse:
    said = "inflates to more than" if inflated else "is more than"
    return Refuse(413, f"the request body {said} the {_megabytes(limit)} this gateway takes (router.max_body)",
                  "request_too_large")


def encoding_of(request: web.Request) -> str:
    """The body's Content-Encoding, or a 415 naming the ones this gateway reads."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in PLAIN or encoding in INFLATED:
        return encoding
    # "gzip, gzip", "x-gzip", "compress" and the like reach the handler as
    # they were sent; reading them as JSON would only give a puzzling error.
    raise Refuse(415, f"Content-Encoding {encoding!r} is not one this gateway reads; send the body as it is, "
                      "or compressed with gzip or deflate", "unsupported_encoding")


async def read_body(request: web.Request, limit: int, encoding: str) -> bytes:
    """The body's bytes, inflated where it was compressed; at most `limit` of them."""
    length = request.content_length
    if length is not None and length > limit:
        raise Refuse(413, f"the request body is {length} bytes, more than the {_megabytes(limit)} this gateway "
                          "takes (router.max_body)", "request_too_large")
    if length == 0:
        return b""
    if length is not None and encoding in PLAIN:
        try:
            return await request.content.readexactly(length)  # one read: the usual case
        except asyncio.IncompleteReadError:
            raise Refuse(400, f"the request body ended before its Content-Length ({length} bytes)",
                         "invalid_request") from None
    chunks, size = [], 0
    try:
        async for chunk in request.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > limit:
                raise _too_large(limit, inflated=encoding in INFLATED)
            chunks.append(chunk)
    except RequestPayloadError:
        # aiohttp's inflater failed: not gzip (or deflate) data at all.
        raise Refuse(400, f"the request body says Content-Encoding {encoding} but is not valid {encoding} data; "
                          "compress it again, or send it uncompressed without the header",
                     "invalid_encoding") from None
    return b"".join(chunks)


async def read_json(request: web.Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object, or a Refuse saying what is wrong with it."""
    encoding = encoding_of(request)
    raw = await read_body(request, limit, encoding)
    if not raw:
        raise Refuse(400, "the request body is empty; send the request as a JSON object", "invalid_request")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if encoding in INFLATED:
            # aiohttp does not check that a gzip stream ends where it should:
            # one cut short inflates to part of a body, with no error of its own.
            raise Refuse(400, f"the request body, inflated from {encoding}, is not valid JSON: {e}; is the "
                              f"{encoding} data whole?", "invalid_json") from None
        raise Refuse(400, f"the request body is not valid JSON: {e}", "invalid_json") from None
    if not isinstance(body, dict):
        raise Refuse(400, "the request body must be a JSON object", "invalid_request")
    # Only a body with that many brackets at all can be nested that deep:
    # counting them is a C loop, so an ordinary request pays no walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(body) > MAX_DEPTH:
        raise Refuse(400, f"the request body is nested more than {MAX_DEPTH} levels deep; no request needs that "
                          "many", "invalid_request")
    return body


def depth(doc: Any) -> int:
    """How deeply lists and objects nest in `doc` (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in node if isinstance(child, (dict, list)))
    return deepest
