"""`llmgw mirror serve`: the mirror's process, until SIGTERM or SIGINT.

It prints one line once it listens (`mirror listening on https://HOST:PORT`), which the setup, the systemd unit's
journal and the tests wait for. A download under way when it stops is carried on at the next start (Range).

mirror.yaml's `peers` are read again whenever the file changes (looked at every RELOAD_EVERY_S): `llmgw mirror
add-peer` names a new peer there, and the mirror keeps in step with it without a restart that would cut the
downloads under way. Every other key takes effect at the next start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys

from aiohttp import web

from llmgw import stopsignals
from llmgw.config import MirrorConfig
from llmgw.errors import ExpectedError
from llmgw.mirror import tls
from llmgw.mirror.api import make_app
from llmgw.mirror.service import Mirror

log = logging.getLogger("llmgw.mirror")

RELOAD_EVERY_S = 2.0


class MirrorStartError(ExpectedError):
    pass


def bind(cfg: MirrorConfig) -> socket.socket:
    host, port = cfg.listen.host, cfg.listen.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host or "0.0.0.0", port))  # noqa: S104 - every interface is what ":8600" says
    except OSError as e:
        sock.close()
        raise MirrorStartError(f"the mirror cannot listen on {cfg.listen}: {e.strerror}; set listen in mirror.yaml "
                               "to a free port") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def shown(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _changed_at(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


async def _read_peers_again(mirror: Mirror, path: str) -> None:
    """mirror.yaml's peers, taken whenever the file changes; a file that no longer loads keeps the peers as they
    were, said once in the log."""
    from llmgw.config import ConfigError, load_mirror_config

    seen = _changed_at(path)
    while True:
        await asyncio.sleep(RELOAD_EVERY_S)
        now = _changed_at(path)
        if now == seen or now is None:
            continue
        seen = now
        try:
            cfg = await asyncio.to_thread(load_mirror_config, path)
        except ConfigError as e:
            log.error("%s changed and does not load (%s); the peers stay as they were", path, e)
            continue
        if mirror.set_peers(list(cfg.peers)):
            log.info("%s changed: keeping in step with %s", path, ", ".join(mirror.peers) or "no peer")


async def serve(cfg: MirrorConfig, config_path: str | None = None) -> None:
    server_ssl, peer_ssl = tls.server_context(cfg), tls.client_context(cfg)
    sock = bind(cfg)
    mirror = Mirror(cfg, peer_ssl)
    runner = web.AppRunner(make_app(mirror), access_log=None, shutdown_timeout=5)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=server_ssl).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopsignals.take(loop, stop.set)
    print(f"mirror listening on {shown(sock)}, keeping {len(mirror.holdings.held)} files in {cfg.dir}", flush=True)
    watcher = loop.create_task(_read_peers_again(mirror, config_path)) if config_path else None
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    print("mirror stopped", file=sys.stderr, flush=True)
