"""A control plane's part in the cluster: the agents' WebSocket on the agent port, and the reconciler.

Every control plane takes agents' connections; only the leader keeps
them (a standby names the leader) and only the leader reconciles. The
other control planes' agent addresses are read from the store, where each
writes its own at start (llmgw.trust), so an agent learns of every
one of them from whichever it reaches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.control.agentsvc import AgentService
from llmgw.control.catalog import Policy
from llmgw.control.certmetrics import CertificateCollector
from llmgw.control.clustermetrics import ClusterCollector
from llmgw.control.mirrormetrics import MirrorCollector
from llmgw.control.mirrors import MirrorKeeper
from llmgw.control.reconciler import Reconciler
from llmgw.protocol import CachedBlocks
from llmgw.store import StoreError
from llmgw.trust import peer_node_id

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

log = logging.getLogger("llmgw.cluster")

AGENT_PATH = "/agent"
ADDRESSES_EVERY = 10.0  # seconds between reads of the control planes' addresses


class Cluster:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._addresses: dict[str, str] = {}  # control plane name -> agent address
        self._read_at = 0.0
        self.agents = AgentService(address="", leading=lambda: plane.lease.leading, leader=self.leader_address,
                                   control_planes=self.control_planes, peer_id=peer_node_id)
        self.reconciler = Reconciler(
            plane.store, self.agents, leading=lambda: plane.lease.leading,
            registry=lambda: plane.routes,
            policy=lambda: Policy(lost_after=float(plane.settings.current.control.node_lost_after)),
            startup_timeout=lambda: float(plane.settings.current.control.startup_timeout),
            engine_key=lambda: plane.trust.engine_key,
            # Every router's requests: this process's or its workers', and the standbys' in the exchange.
            demand=plane.demand, tracing=plane.tracing, events=plane.events,
            mirrors=lambda profile: self.mirrors.for_start(profile), tokenizers=plane.tokenizers.root)
        self.mirrors = MirrorKeeper(plane.store, lambda: plane.settings.current.mirror, plane.trust.client_context,
                                    leading=lambda: plane.lease.leading)
        # Each replica's cached blocks, as its agent follows them, to this control plane's routers.
        self.agents.on_message(lambda _node, message: plane.routes.cached_blocks(message)
                               if isinstance(message, CachedBlocks) else None)
        plane.registry.register(self.reconciler.pass_seconds)
        plane.registry.register(ClusterCollector(self.agents, self.reconciler, lambda: plane.lease.leading))
        plane.registry.register(MirrorCollector(self.mirrors, lambda: plane.lease.leading))
        plane.registry.register(CertificateCollector(plane.trust.expiries))
        self._task: asyncio.Task[None] | None = None

    def mount(self, app: web.Application) -> None:
        app.router.add_get(AGENT_PATH, self.agents.handle)

    async def start(self) -> None:
        self.agents.address = self.plane.trust.agent_address or ""
        await self._read_addresses()
        self.reconciler.start()
        self.mirrors.start()
        self._task = asyncio.create_task(self._watch_addresses(), name="control-plane-addresses")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.reconciler.stop()
        await self.mirrors.stop()
        await self.agents.drop_all("the control plane is stopping")

    def leadership_changed(self, leading: bool) -> None:
        if not leading:
            # Agents must report to the leader: closing their links sends them to find it.
            self.agents.spawn(self.agents.drop_all("this control plane no longer leads"))
        self.agents.changed.set()

    def control_planes(self) -> list[str]:
        return sorted(set(self._addresses.values()) | ({self.agents.address} if self.agents.address else set()))

    def leader_address(self) -> str:
        lease = self.plane.lease.state.lease
        if lease is None or lease.expires_at < time.time():
            return ""
        name = lease.holder.rsplit("#", 1)[0]
        return self._addresses.get(name, "")

    async def _read_addresses(self) -> None:
        try:
            self._addresses = {cp.name: cp.agent_address for cp in await self.plane.store.list_control_planes()}
        except StoreError as e:
            log.debug("control planes' addresses not read: %s", e)

    async def _watch_addresses(self) -> None:
        while True:
            await asyncio.sleep(ADDRESSES_EVERY)
            await self._read_addresses()
