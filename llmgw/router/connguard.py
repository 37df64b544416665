"""The client listener's guard against clients that hold connections without using them.

aiohttp's server closes a kept-alive connection after a while, but it has no
limit on how long a request's headers or body may take: 2,000 connections
sending half a header, or a body a byte at a time, were all still open after
150 s (issue 10). The guard sits between the socket and aiohttp's protocol,
sees every byte, and knows from the client app's middleware when a request's
headers are in and when its answer is done. Each connection is in one phase:

- headers: from its start, or from the first byte after an answer, until the
  app has the request: `router.timeouts.client_headers`;
- body: the app is reading the body; once `client_body_grace` has passed,
  the bytes since the headers must average `client_body_rate` a second;
- answering: nothing is asked of the client;
- idle: kept alive between requests: `router.timeouts.client_idle`.

It also caps the connections one address holds open
(`router.max_connections_per_address`), trusted proxies excepted, and counts
every connection it closes or refuses by reason in
`llmgw_client_connections_closed_total`. The settings are read live.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, Counter

from llmgw.config import RouterSettings, Timeouts
from llmgw.router.clientaddr import parse, proxies

log = logging.getLogger("llmgw.router")

REASONS = ("header_timeout", "slow_body", "idle", "over_cap")
RATE_CHECK_EVERY = 1.0  # seconds between body-rate checks after the grace

HEADERS, BODY, ANSWERING, IDLE = "headers", "body", "answering", "idle"


class ConnectionGuard:
    """One client listener's connections (all of its sites), under the router's settings of the moment."""

    def __init__(self, registry: CollectorRegistry, settings: Callable[[], RouterSettings]):
        self._settings = settings
        counter = Counter("llmgw_client_connections_closed",
                          "Client connections the gateway closed or refused, by reason", ["reason"],
                          registry=registry)
        self._closed = {reason: counter.labels(reason) for reason in REASONS}
        self._per_address: dict[str, int] = {}
        self._open: dict[asyncio.BaseTransport, _Guarded] = {}

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(self, inner)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Tells the connection's guard that headers are in, and when the answer is done."""
        conn = self._open.get(request.transport) if request.transport is not None else None
        if conn is None:
            return await handler(request)
        conn.request_started(request)
        try:
            return await handler(request)
        finally:
            conn.request_ended()

    def open_connections(self, address: str | None = None) -> int:
        if address is None:
            return len(self._open)
        return self._per_address.get(address, 0)

    # -- used by _Guarded

    def _admit(self, conn: _Guarded, transport: asyncio.BaseTransport, address: str) -> bool:
        settings = self._settings()
        cap = settings.max_connections_per_address
        trusted = proxies(tuple(settings.trusted_proxies)).trusts(parse(address))
        if cap and not trusted and self._per_address.get(address, 0) >= cap:
            self.count("over_cap")
            return False
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self._open[transport] = conn
        return True

    def _release(self, conn: _Guarded) -> None:
        if conn.transport is None or self._open.pop(conn.transport, None) is None:
            return
        left = self._per_address.get(conn.address, 1) - 1
        if left > 0:
            self._per_address[conn.address] = left
        else:
            self._per_address.pop(conn.address, None)

    def count(self, reason: str) -> None:
        self._closed[reason].inc()

    def timeouts(self) -> Timeouts:
        return self._settings().timeouts


def _refusal(address: str, cap: int) -> bytes:
    body = orjson.dumps({"error": {
        "message": f"{address} has {cap} connections open to this gateway already "
                   "(router.max_connections_per_address); reuse them or close some",
        "type": "rate_limit_error", "param": None, "code": "too_many_connections"}})
    return (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Retry-After: 1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the guard's clock around it."""

    def __init__(self, guard: ConnectionGuard, inner: Callable[[], asyncio.Protocol]):
        self.guard = guard
        self._make_inner = inner
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.address = "-"
        self.phase = HEADERS
        self.received = 0
        self._timer: asyncio.TimerHandle | None = None
        self._request: web.Request | None = None
        self._body_from = (0.0, 0)  # when and at which byte count the body's rate is measured from

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's signature names the base of every kind of transport; a stream server's is a Transport.
        # Not checked at run time: uvloop's transports do not subclass asyncio.Transport.
        stream: asyncio.Transport = transport  # type: ignore[assignment]
        self.transport = stream
        peer = transport.get_extra_info("peername")
        parsed = parse(peer[0]) if isinstance(peer, tuple) and peer else None
        self.address = str(parsed) if parsed is not None else "-"
        if not self.guard._admit(self, stream, self.address):
            cap = self.guard._settings().max_connections_per_address
            stream.write(_refusal(self.address, cap))
            stream.close()
            return
        self.inner = self._make_inner()
        self.inner.connection_made(transport)
        self._arm(self.guard.timeouts().client_headers, "header_timeout")

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        self.received += len(data)
        if self.phase == IDLE:
            self.phase = HEADERS
            self._arm(self.guard.timeouts().client_headers, "header_timeout")
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._request = None
        if self.inner is None:
            return
        self.guard._release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # -- told by the middleware

    def request_started(self, request: web.Request) -> None:
        self.phase = BODY
        self._request = request
        loop = asyncio.get_running_loop()
        self._body_from = (loop.time(), self.received)
        self._arm(self.guard.timeouts().client_body_grace, None, self._check_body)

    def request_ended(self) -> None:
        self._request = None
        if self.transport is None or self.transport.is_closing():
            return
        self.phase = IDLE
        self._arm(self.guard.timeouts().client_idle, "idle")

    # -- the clock

    def _check_body(self) -> None:
        self._timer = None
        request, transport = self._request, self.transport
        if self.phase != BODY or request is None or transport is None:
            return
        if request.content.is_eof():
            self.phase = ANSWERING  # the whole body is in: nothing more is asked of the client
            return
        loop = asyncio.get_running_loop()
        if not transport.is_reading():
            # aiohttp stopped reading because the handler has not taken what came:
            # the wait is ours, not the client's; measure afresh when it reads again.
            self._body_from = (loop.time(), self.received)
            self._arm(RATE_CHECK_EVERY, None, self._check_body)
            return
        floor = int(self.guard.timeouts().client_body_rate)
        since, at = self._body_from
        elapsed = loop.time() - since
        if floor and self.received - at < floor * elapsed:
            self._close("slow_body")
            return
        self._arm(RATE_CHECK_EVERY, None, self._check_body)

    def _arm(self, after: float, reason: str | None, then: Callable[[], None] | None = None) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(float(after), then or (lambda: self._expire(reason)))

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, reason: str | None) -> None:
        self._timer = None
        if reason == "header_timeout" and self.phase != HEADERS:
            return
        if reason == "idle" and self.phase != IDLE:
            return
        self._close(reason or "idle")

    def _close(self, reason: str) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.guard.count(reason)
        log.debug("closed a client connection from %s: %s", self.address, reason)
        self.transport.close()


class GuardedSite(web.SockSite):
    """A SockSite whose connections go through the app's ConnectionGuard."""

    __slots__ = ("_guard",)

    def __init__(self, runner: web.AppRunner, sock: socket.socket, guard: ConnectionGuard, **kwargs: Any):
        super().__init__(runner, sock, **kwargs)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server), sock=self._sock, ssl=self._ssl_context, backlog=self._backlog)
