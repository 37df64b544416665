"""A standby's `/v1`: passed on to the leader, whose router answers and records it.

Unless a standby answers itself (`router.active_active`, while it hears
from the leader), a request that reaches it is sent on to the leader's
client address as it came (method, path, query, headers, body), and the
leader's answer is relayed back as it arrives, a stream token by token.
The key is checked and the usage row written by the leader, once.

A request another control plane has passed on already is never passed on
again: two control planes that each believe the other leads would
otherwise bounce it between them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from llmgw.router.body import encoding_of, read_body
from llmgw.router.call import Refuse
from llmgw.router.errors import api_error

if TYPE_CHECKING:
    from llmgw.store import Lease

PASSED_BY = "x-llmgw-passed-by"
CONNECT_TIMEOUT = 3.0
RETRY_AFTER = "5"
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the relay sets again itself.
_NOT_PASSED = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
                         "upgrade", "host", "content-length", "proxy-authorization", "proxy-authenticate"})


def leader_url(lease: Lease | None) -> str | None:
    """The leader's client address while its lease holds."""
    if lease is None or lease.expires_at <= time.time() or not lease.address:
        return None
    return lease.address.rstrip("/")


async def pass_on(request: web.Request, session: aiohttp.ClientSession, name: str, lease: Lease | None,
                  max_body: int, total_timeout: float) -> web.StreamResponse:
    if request.headers.get(PASSED_BY):
        return api_error(503, f"control plane {request.headers[PASSED_BY]} passed this request to {name}, which "
                              "does not lead either; leadership is changing, try again in a few seconds",
                         "no_leader", headers={"Retry-After": RETRY_AFTER})
    target = leader_url(lease)
    if target is None:
        return api_error(503, f"{name} stands by and no control plane leads right now; one takes over within "
                              "seconds, try again", "no_leader", headers={"Retry-After": RETRY_AFTER})
    # Read as the leader's own handler reads it: whole (read(n) stops at
    # what has arrived), inflated, and within max_body as inflated. The
    # body goes on inflated, so its Content-Encoding stays behind.
    try:
        body = await read_body(request, max_body, encoding_of(request))
    except Refuse as refused:
        return api_error(refused.status, refused.message, refused.code)
    except ConnectionError:
        return api_error(400, "the request body ended before it was complete", "invalid_request")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_PASSED and
               k.lower() != "content-encoding"}
    forwarded = request.headers.get("X-Forwarded-For")
    remote = request.remote or ""
    headers["X-Forwarded-For"] = f"{forwarded}, {remote}" if forwarded else remote
    headers[PASSED_BY] = name
    timeout = aiohttp.ClientTimeout(total=total_timeout, connect=CONNECT_TIMEOUT)
    response: web.StreamResponse | None = None
    try:
        async with session.request(request.method, target + request.rel_url.raw_path_qs, data=body or None,
                                   headers=headers, timeout=timeout, allow_redirects=False) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for key, value in answer.headers.items():
                if key.lower() not in _NOT_PASSED:
                    response.headers.add(key, value)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
    except (TimeoutError, aiohttp.ClientConnectionError, OSError) as e:
        if response is not None and response.prepared:
            # The answer had begun: the client sees its connection end, as it would with the leader's own.
            if request.transport is not None:
                request.transport.close()
            return response
        return api_error(503, f"{name} stands by and passes requests to the leader at {target}, which did not "
                              f"answer ({type(e).__name__}); if it is gone a standby takes over within seconds, "
                              "try again", "leader_unreachable", headers={"Retry-After": RETRY_AFTER})
