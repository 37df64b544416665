"""The link between two nodes, measured: `llmgw ctl fabric-test A B` (docs/large-models.md).

The leader tells node B to `serve` and node A to `probe` (FabricTest, over each one's mutual-TLS link to it). B
listens once on the address it advertises, on a port the kernel picks (the ephemeral range, which `llmgw
firewall on` opens to the cluster's machines only), for a connection that begins with the test's one-time
token; A connects, times PINGS round trips of one byte, then asks for the test's bytes and times their receipt.
Plain TCP, as llama.cpp's RPC or NCCL's traffic is, so the figure is the link's; B takes one connection, the
right token or none, and is gone after SERVE_FOR seconds either way.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time

from llmgw.protocol import FabricResult, FabricTest

log = logging.getLogger("llmgw.agent")

SERVE_FOR = 120.0
CHUNK = 1 << 20
# What one test may ask a node to send: a minute of a 100 Gb/s link.
MOST_BYTES = 64 << 30


class FabricError(Exception):
    pass


async def serve(message: FabricTest, host: str) -> tuple[FabricResult, asyncio.Task[None]]:
    """Listen for the probe; the answer to send now, and the task that serves it (ended after SERVE_FOR)."""
    token = message.token.encode()
    done = asyncio.Event()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if done.is_set():
            writer.close()
            return
        done.set()  # one connection a test, whoever it is from
        try:
            given = await asyncio.wait_for(reader.readexactly(len(token)), 10)
            if not hmac.compare_digest(given, token):
                log.warning("fabric test %s: a connection without its token was refused", message.request_id)
                return
            while True:
                kind = await reader.readexactly(1)
                if kind == b"p":
                    writer.write(b"p")
                    await writer.drain()
                elif kind == b"b":
                    size = min(int.from_bytes(await reader.readexactly(8), "big"), MOST_BYTES)
                    block = bytes(CHUNK)
                    while size > 0:
                        writer.write(block[:min(CHUNK, size)])
                        size -= CHUNK
                        await writer.drain()
                else:
                    return
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(one, host, 0)
    port = server.sockets[0].getsockname()[1]

    async def until_done() -> None:
        async with server:
            try:
                await asyncio.wait_for(done.wait(), SERVE_FOR)
            except TimeoutError:
                return
            # The one connection is served by its handler; the listener is closed at once.
            server.close()

    task = asyncio.get_running_loop().create_task(until_done(), name=f"fabric-{message.request_id}")
    shown = f"[{host}]" if ":" in host else host
    return FabricResult(message.request_id, address=f"{shown}:{port}"), task


async def probe(message: FabricTest) -> FabricResult:
    """Connect to the serving node and time the round trips and the bytes."""
    host, _, port = message.address.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), 10)
    except (OSError, ValueError, TimeoutError) as e:
        return FabricResult(message.request_id, error=f"could not reach {message.address}: {e or type(e).__name__}")
    try:
        writer.write(message.token.encode())
        rtts = []
        for _ in range(max(1, message.pings)):
            started = time.perf_counter()
            writer.write(b"p")
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(1), 10)
            rtts.append((time.perf_counter() - started) * 1000)
        size = min(message.bytes, MOST_BYTES)
        started = time.perf_counter()
        writer.write(b"b" + size.to_bytes(8, "big"))
        await writer.drain()
        got = 0
        while got < size:
            chunk = await asyncio.wait_for(reader.read(CHUNK), 30)
            if not chunk:
                break
            got += len(chunk)
        seconds = time.perf_counter() - started
        writer.write(b"q")
        if got < size:
            return FabricResult(message.request_id, rtt_ms=rtts, bytes=got, seconds=seconds,
                                error=f"the other node stopped sending after {got} of {size} bytes")
        return FabricResult(message.request_id, rtt_ms=rtts, bytes=got, seconds=seconds)
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
        return FabricResult(message.request_id,
                            error=f"the other node closed the test ({e or type(e).__name__}): a wrong token, or gone")
    finally:
        writer.close()
