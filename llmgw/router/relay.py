"""Relaying an engine's answer to the client, and reading its token counts on the way.

A stream is passed on as the engine sends it: whatever has arrived since the
last write goes out in one write, cut at the last complete event so a client
never sees half of one. Only events that mention `usage` are parsed (one per
answer, at its end); the rest are looked at as bytes. The router always asks
the engine for that usage event, because tokens are what limits, budgets and
usage rows count; a client that did not ask for it does not get it. When
it never comes (the engine cut the stream), router.tally counts instead, the
same way for every API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Protocol

import orjson

from llmgw.router import sse
from llmgw.router.call import Call
from llmgw.router.tally import Tally
from llmgw.router.translate.common import Event
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.guarded import ChunkGuard

DONE = b"data: [DONE]"
CUT_EVENT = (b'data: {"error": {"message": "the engine stopped before the answer was complete", '
             b'"type": "server_error", "code": "upstream_cut"}}\n\n')


class StreamScanner:
    """Counts what an OpenAI-shaped stream carries and drops the usage event the client did not ask for."""

    def __init__(self, call: Call, guard: ChunkGuard | None = None):
        self.call = call
        self.guard = guard  # when a policy reads the answer
        self.done = False
        self.tally = Tally(call, held=guard is not None)

    def scan(self, block: bytes) -> bytes:
        if DONE in block:
            self.done = True
        if self.guard is not None:
            return self._guarded(block)
        if b'"usage"' not in block:
            self.tally.raw(block)
            return block
        kept = []
        for event in sse.events(block):
            payload = sse.data(event) if b'"usage"' in event else None
            if payload and payload[:1] == b"{":
                try:
                    chunk = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    kept.append(event)
                    continue
                usage = chunk.get("usage")
                self.tally.engine_usage(usage)
                if usage and not chunk.get("choices") and not self.call.wants_usage:
                    continue
            self.tally.raw(event)
            kept.append(event)
        return b"".join(e + b"\n\n" for e in kept)

    def _guarded(self, block: bytes) -> bytes:
        """Every event parsed (once) and rewritten by the policy's checker."""
        guard = self.guard
        assert guard is not None  # scan() comes here only with one
        out = []
        for event, chunk in self._parsed(block):
            out.append(event if chunk is None else self._encode(self.tally.released(guard.rewrite(chunk))))
        return b"".join(out)

    async def ascan(self, block: bytes) -> bytes:
        """scan() for a policy whose judge or services are awaited before the answer's end."""
        if DONE in block:
            self.done = True
        guard = self.guard
        assert guard is not None  # asked for only by a policy that reads the answer
        out = []
        for event, chunk in self._parsed(block):
            out.append(event if chunk is None else
                       self._encode(self.tally.released(await guard.arewrite(chunk))))
        return b"".join(out)

    def _parsed(self, block: bytes) -> Iterator[tuple[bytes, JSON | None]]:
        """(event, None) to pass on as it is, or (b"", chunk) for the guard; usage read on the way."""
        # After a stop by the policy nothing more is passed on (the engine's
        # [DONE] included: the stop sent its own), but the engine's usage
        # is still read, and its events counted: the tokens it made are billed.
        guard = self.guard
        assert guard is not None  # only a guarded scan parses every event
        for event in sse.events(block):
            payload = sse.data(event)
            if not payload or payload[:1] != b"{":
                if not guard.finished:
                    yield event + b"\n\n", None
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                if not guard.finished:
                    yield event + b"\n\n", None
                continue
            usage = chunk.get("usage")
            self.tally.engine_usage(usage)
            self.tally.chunk(chunk)
            if usage and not chunk.get("choices") and not self.call.wants_usage:
                continue
            if not guard.finished:
                yield b"", chunk

    def _encode(self, chunks: list[JSON]) -> bytes:
        from llmgw.router.guarded import encode_chunks

        out = encode_chunks(chunks)
        if self.guard is not None and self.guard.finished:
            # Stopped by the policy: the client's stream ends here, whole.
            self.done = True
            out += DONE + b"\n\n"
        return out

    def finish(self) -> None:
        """The stream is over, whole or cut: the call's tokens, billed and delivered."""
        self.tally.settle()


async def relay(first: bytes, read_more: Callable[[], Awaitable[bytes]], write: Callable[[bytes], Awaitable[None]],
                *, idle: float,
                transform: Callable[[bytes], bytes], on_first: Callable[[], None],
                atransform: Callable[[bytes], Awaitable[bytes]] | None = None) -> None:
    """Pass a stream on until the engine's side ends.

    `read_more()` gives the next bytes (b"" at the end); `write(bytes)`
    sends to the client; `transform` turns complete events into what the
    client receives. `atransform`, when given, is used instead: a policy
    whose judge or services must answer before the answer's end is sent.
    Raises asyncio.TimeoutError after `idle` seconds of silence.
    """
    splitter = sse.Splitter()
    chunk = first
    seen_first = False
    while chunk:
        ready = splitter.feed(chunk)
        if ready:
            out = transform(ready) if atransform is None else await atransform(ready)
            if out:
                if not seen_first:
                    seen_first = True
                    on_first()
                await write(out)
        async with asyncio.timeout(idle):
            chunk = await read_more()
    rest = splitter.rest()
    if rest:
        out = transform(rest) if atransform is None else await atransform(rest)
        if out:
            await write(out)


class Translator(Protocol):
    """One of router.translate's stream classes: chat chunks in, the client API's events out."""

    def feed(self, chunk: JSON) -> list[Event]: ...

    def finish(self) -> list[Event]: ...

    def error(self, message: str) -> list[Event]: ...


class TranslatedStream:
    """Chat chunks in, another API's events out, through one of router.translate's stream classes."""

    def __init__(self, call: Call, translator: Translator, encode: Callable[[list[Event]], bytes],
                 guard: ChunkGuard | None = None):
        self.call = call
        self.guard = guard
        self.translator = translator
        self.encode = encode
        self.done = False
        self.tally = Tally(call, held=guard is not None)

    def transform(self, block: bytes) -> bytes:
        produced = []
        for chunk in self._chunks(block):
            if self.guard is None:
                produced.extend(self.translator.feed(chunk))
            else:
                for rewritten in self.tally.released(self.guard.rewrite(chunk)):
                    produced.extend(self.translator.feed(rewritten))
        return self.encode(produced) if produced else b""

    async def atransform(self, block: bytes) -> bytes:
        """transform() for a policy whose judge or services are awaited before the answer's end."""
        guard = self.guard
        assert guard is not None  # asked for only by a policy that reads the answer
        produced = []
        for chunk in self._chunks(block):
            for rewritten in self.tally.released(await guard.arewrite(chunk)):
                produced.extend(self.translator.feed(rewritten))
        return self.encode(produced) if produced else b""

    def _chunks(self, block: bytes) -> Iterator[JSON]:
        for payload in sse.payloads(block):
            if payload == sse.DONE:
                self.done = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            self.tally.engine_usage(chunk.get("usage"))
            self.tally.chunk(chunk)
            yield chunk

    def finish(self) -> bytes:
        self.tally.settle()
        return self.encode(self.translator.finish())

    def cut(self, message: str) -> bytes:
        """The engine's side ended early: the API's error event; billed as StreamScanner bills a cut chat."""
        self.tally.settle()
        return self.encode(self.translator.error(message))
