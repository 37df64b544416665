"""A real control plane in the test's own process, for a test that calls what it holds (its MCP tools).

The plane is the one `llmgw server` runs (ports, admin token, store, lease,
listeners, the agents' WebSocket), on the ports and data directory a
`Server` was initialised with, so `server.ctl(…)` and a real `llmgw agent`
reach it as they would the program. It runs on an event loop of its own in
a thread: the test's blocking calls (`llmgw ctl`, joining an agent) wait on
it without stopping it, and `run(coro)` runs a call on the plane's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from llmgw.config import ServerConfig, cluster_part, from_dict, to_dict
from llmgw.control.plane import ControlPlane, take_ports
from llmgw.control.token import ensure_token
from llmgw.store import open_store
from tests.support.servers import ROLES, Server

T = TypeVar("T")


class PlaneThread:
    def __init__(self, server: Server):
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"plane-{server.name}", daemon=True)
        self.plane: ControlPlane | None = None

    def start(self) -> PlaneThread:
        self.thread.start()
        self.plane = self.run(self._start())
        return self

    async def _start(self) -> ControlPlane:
        doc = to_dict(ServerConfig())
        doc.update({"name": self.server.name, "data_dir": str(self.server.data_dir), "store": self.server.store})
        doc["listen"].update({role: f"127.0.0.1:{self.server.ports[role]}" for role in ROLES})
        cfg = from_dict(ServerConfig, doc)
        sockets = take_ports(cfg)
        store = await open_store(cfg.store)
        plane = ControlPlane(cfg, store, ensure_token(cfg.admin_token_path), sockets, [])
        await plane.start(cluster_part(cfg))
        return plane

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run `coro` on the plane's loop and return what it returns."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.plane is not None:
            self.run(self.plane.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()
