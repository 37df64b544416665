"""One agent's WebSocket, either end: messages in and out, and a ping when it goes quiet.

A connection that dies without a close (a cable pulled, a machine frozen,
a SIGKILLed leader behind a floating address) looks exactly like a quiet
one to TCP for minutes. So after QUIET seconds with no frame the link sends
a ping, and if nothing at all arrives within ANSWER seconds it is declared
lost: the agent dials the next control plane, the control plane counts the
node's heartbeat as missed. Both ends run the same rule.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from llmgw.protocol import Error, ProtocolError, decode, encode

log = logging.getLogger("llmgw.protocol")

QUIET = 5.0  # seconds without a frame before a ping
ANSWER = 3.0  # seconds a ping has to be answered (by anything)


class LinkLost(Exception):
    """The other end stopped answering, or closed."""


class Link:
    """Messages over a WebSocket (aiohttp's server or client kind), with the quiet-ping rule.

    The WebSocket must be made with autoping=False: pings are answered here,
    so that a pong can count as a sign of life.
    """

    def __init__(self, ws: Any, *, peer: str = "", quiet: float = QUIET, answer: float = ANSWER) -> None:
        self.ws = ws
        self.peer = peer
        self.quiet, self.answer = quiet, answer
        self._send_lock = asyncio.Lock()
        self.closed_because = ""

    async def send(self, message: Any) -> None:
        data = encode(message).decode()
        async with self._send_lock:
            if self.ws.closed:
                raise LinkLost(f"the connection to {self.peer or 'the other end'} is closed")
            try:
                await self.ws.send_str(data)
            except (ConnectionResetError, aiohttp.ClientConnectionError) as e:
                raise LinkLost(f"sending to {self.peer or 'the other end'} failed: {e}") from None

    async def close(self, why: str = "") -> None:
        self.closed_because = self.closed_because or why
        if not self.ws.closed:
            try:
                await self.ws.close(message=why.encode()[:120])
            except Exception:  # noqa: BLE001 - closing a connection that is already broken
                pass

    async def messages(self) -> AsyncIterator[Any]:
        """Each message as it arrives; ends when the other end closes. Raises LinkLost when it goes silent."""
        pinged = False
        while True:
            try:
                frame = await self.ws.receive(timeout=self.answer if pinged else self.quiet)
            except TimeoutError:
                if pinged:
                    why = f"{self.peer or 'the other end'} did not answer a ping within {self.answer:g} s"
                    await self.close(why)
                    raise LinkLost(why) from None
                try:
                    await self.ws.ping()
                except (ConnectionResetError, aiohttp.ClientConnectionError) as e:
                    raise LinkLost(f"pinging {self.peer or 'the other end'} failed: {e}") from None
                pinged = True
                continue
            pinged = False
            kind = frame.type
            if kind in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                try:
                    yield decode(frame.data)
                except ProtocolError as e:
                    log.warning("a message from %s was not understood: %s", self.peer or "the other end", e)
                    try:
                        await self.send(Error(str(e)))
                    except LinkLost:
                        return
            elif kind == aiohttp.WSMsgType.PING:
                await self.ws.pong(frame.data)
            elif kind == aiohttp.WSMsgType.PONG:
                continue
            else:  # CLOSE, CLOSING, CLOSED, ERROR
                if kind == aiohttp.WSMsgType.ERROR:
                    self.closed_because = self.closed_because or f"connection error: {self.ws.exception()}"
                elif frame.extra:
                    self.closed_because = self.closed_because or str(frame.extra)
                return
