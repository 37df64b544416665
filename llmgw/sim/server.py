"""Running a sim-engine: take the port, serve until SIGTERM or SIGINT, stop cleanly."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import sys

from aiohttp import web

from llmgw import stopsignals
from llmgw.sim.config import SimConfig
from llmgw.sim.engine import Engine

# In-flight answers get this long to finish on SIGTERM; a sim holds nothing
# worth waiting for, and a test's teardown should not wait for a hung request.
SHUTDOWN_SECONDS = 1.0


class SimError(Exception):
    """A sim-engine that cannot start, in a sentence."""


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SimError(f"the port {port} on {host} is taken by another process "
                           f"(ss -ltnp 'sport = :{port}' shows which); pick another with --port") from None
        if e.errno == errno.EACCES:
            raise SimError(f"the port {port} needs privileges this process lacks; use a port above 1023") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise SimError(f"{host} is not an address of this machine; try --host 127.0.0.1") from None
        raise SimError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    except socket.gaierror as e:
        sock.close()
        raise SimError(f"{host} is not an address this machine can listen on: {e.strerror}") from None
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(cfg: SimConfig, sock: socket.socket | None = None, semantic=None, cache=None) -> None:
    """Serve until SIGTERM or SIGINT; prints one line once it is listening.

    `semantic` is a loaded semantic.SemanticModel for /v1/embeddings; loaded
    before this, so the line is printed only once embeddings can be answered;
    `cache` a prefixcache.PrefixCache (--tokenizer), closed here at the end.
    """
    sock = sock or bind(cfg.host, cfg.port)
    engine = Engine(cfg, semantic, cache)
    # handler_cancellation: a client that hangs up stops its stream (and a
    # --hang request) at once, instead of the sim writing into a dead socket.
    server = web.Server(engine.handle, handler_cancellation=True, access_log=None)
    runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopsignals.take(loop, stop.set)
    print(f"sim-engine {cfg.model} listening on {url(sock)}", flush=True)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        if cache is not None:
            cache.close()
    print(f"sim-engine {cfg.model} stopped", file=sys.stderr, flush=True)
