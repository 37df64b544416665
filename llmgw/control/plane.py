"""One control plane: its listeners, its store, the lease and the services on them.

Start order is the point of this module: ports first (a twin exits before it
touches anything), then the admin token, then the store, then settings,
lease and the listeners' handlers. Shutdown runs it backwards and gives the
lease up, so a standby leads at once instead of after the TTL.

With `workers` above 1 the client port is served by worker processes
(control/workers/) and this process keeps the rest; it still takes every
port first, the client port included, so a twin is refused the same way.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llmgw import __version__, heap, stopsignals
from llmgw.account import Accounts, ChatTokens, KeyCache, Principal, UnknownKeyThrottle
from llmgw.auth import DirectoryAccounts, LdapSync, Secrets
from llmgw.config import ClusterSettings, HubSettings, ServerConfig, cluster_part, own_secrets
from llmgw.control.adminapi import make_admin_app
from llmgw.control.adminapi.models import catalog_of
from llmgw.control.announce import announcement
from llmgw.control.catalog import Demand, Policy
from llmgw.control.cluster import Cluster
from llmgw.control.exchange import Exchange, RouterCounts, merged_asks
from llmgw.control.lease import LeaseKeeper
from llmgw.control.listeners import LISTEN_BACKLOG, bind, client_site, share_port, shown
from llmgw.control.mirrors import hub_client
from llmgw.control.presets import Presets
from llmgw.control.routes import RouteBoard, Routes, from_store, probed
from llmgw.control.scrapetargets import ScrapeTargets
from llmgw.control.settings import ClusterSettingsWatcher
from llmgw.control.token import AdminToken, ensure_token
from llmgw.control.tokenizers import TokenizerKeeper
from llmgw.control.upgrade import UpgradeMachine, Upgrader
from llmgw.control.workers import FannedKeys, WorkerPool
from llmgw.events import Events
from llmgw.guard import missing_detectors
from llmgw.hub import Hub
from llmgw.kb import KnowledgeBases
from llmgw.notify import Notifier
from llmgw.plugins import Plugins
from llmgw.release import confirm
from llmgw.router import BatchRunner, JobRunner, Router, make_client_app
from llmgw.store import Person, Store, StoreError, open_store
from llmgw.telemetry import Tracing
from llmgw.trust import ClusterTrust, make_agent_app

log = logging.getLogger("llmgw.server")


class PlaneKeys(Protocol):
    """The plane's key cache: a KeyCache, or with workers a FannedKeys around it.

    The client app looks keys up in it (llmgw.router.plane.KeyLookup); the
    admin API drops a changed key from it, and with workers what it drops
    every worker drops too.
    """

    def remembers(self, secret: str) -> bool: ...

    async def lookup(self, secret: str) -> Principal | None: ...

    def invalidate(self, key_id: str) -> None: ...

    def clear(self) -> None: ...


# Adds routes to a client app, given the app and the process serving it (a ControlPlane or a
# Worker): how a floor above control (the portal) reaches the client port without control
# importing it. cli/server.py passes llmgw.portal.mount.
ClientExtension = Callable[[web.Application, Any], None]


class ControlPlane:
    def __init__(self, cfg: ServerConfig, store: Store, admin_token: AdminToken,
                 sockets: dict[str, socket.socket], seeded_keys: list[str],
                 worker_sockets: list[socket.socket] | None = None, *, plugins: Plugins | None = None,
                 extend: ClientExtension | None = None):
        self.cfg = cfg
        self.extend = extend
        self.plugins = plugins or Plugins()
        self.name = cfg.machine_name
        # Unique per process: a restarted server is a new holder and waits
        # out its predecessor's lease rather than two processes sharing one.
        self.holder = f"{self.name}#{secrets.token_hex(3)}"
        self.store = store
        self.admin_token = admin_token
        self.sockets = sockets
        self.listen_addresses = {role: shown(s) for role, s in sockets.items()}
        self.seeded_keys = seeded_keys
        self.started = time.monotonic()
        self.settings = ClusterSettingsWatcher(store)
        # The events bus (llmgw/events.py): one for this process, handed to what emits. Cluster-wide
        # kinds are told only while this plane leads; the webhooks' recorder subscribes in start().
        self.events = Events(leading=lambda: self.lease.leading)
        self.lease = LeaseKeeper(store, self.holder, self.advertise(),
                                 ttl=lambda: float(self.settings.current.control.lease_ttl),
                                 on_change=self._leadership_changed)
        self.keys: PlaneKeys = KeyCache(store, ttl=lambda: float(self.settings.current.auth.cache_ttl))
        self.chat = ChatTokens(store, ttl=lambda: float(self.settings.current.auth.cache_ttl),
                               idle=lambda: float(self.settings.current.auth.session_idle))
        self.throttle = UnknownKeyThrottle(lambda: self.settings.current.auth.unknown_key_rate)
        self.accounts = Accounts(store, self.events)
        # The administrator's knowledge bases: the admin API's /api/v1/kb and the portal's /admin/kb.
        self.knowledge = KnowledgeBases(store, self.accounts.audit,
                                        lambda: self.settings.current.router.knowledge.embedding_model)
        # The notification webhooks: every event kept as deliveries in the store; sent while this plane leads.
        self.notify = Notifier(store, self.events, lambda: self.settings.current.notify, cfg.data_dir,
                               leading=lambda: self.lease.leading)
        # The directory sync runs here, on the leader; what it suspends, this plane's caches forget at once.
        # What `llmgw people link` calls (the admin API), and the sync's account rules.
        self.directory = DirectoryAccounts(store, self.accounts.people, self.accounts.audit,
                                           break_glass=lambda: self.settings.current.auth.break_glass)
        self.ldap_sync = LdapSync(store, lambda: self.settings.current.auth,
                                  Secrets(store, cfg.data_dir, own_secrets(cfg)), self.directory,
                                  leading=lambda: self.lease.leading, on_suspended=self._forget_person)
        self.registry = CollectorRegistry()
        self._leader_gauge = Gauge("llmgw_leader", "1 while this control plane leads", registry=self.registry)
        self._settings_gauge = Gauge("llmgw_settings_version", "Cluster settings version in force",
                                     registry=self.registry)
        Info("llmgw_build", "This program's version", registry=self.registry).info({"version": __version__})
        # This process's traces (telemetry.*, live): its requests' and, as leader, its replica starts'.
        self.tracing = Tracing("llmgw-server", self.name, __version__)
        # With workers the routers are theirs; this process has none.
        self.workers: WorkerPool | None = None
        self._router: Router | None = None
        if worker_sockets:
            self.workers = WorkerPool(self, worker_sockets)
            self.keys = FannedKeys(self.keys, self.workers)
        else:
            self._router = Router(store, lambda: self.settings.current, self.registry,
                                  own_secrets=own_secrets(cfg), tracing=self.tracing, events=self.events)
        # The catalog's ready replicas, from whichever source is in force (control/routes.py).
        self.routes = RouteBoard(self.workers.routes if self.workers else self.router.registry)
        self.trust = ClusterTrust(store, cfg.data_dir, self.name)
        # The Hugging Face models' tokenizers, for routing by cache on this control plane (control/tokenizers.py).
        self.tokenizers = TokenizerKeeper(Path(cfg.data_dir) / "tokenizers", store,
                                          lambda: self.hub_client(self.settings.current.hub))
        # Functions that add routes to the agent port's app (agents' streams,
        # the standbys' exchange); each sits behind its certificate rule.
        self.agent_mounts: list[Callable[[web.Application], None]] = []
        self.cluster = Cluster(self)
        self.agent_mounts.append(self.cluster.mount)
        self.exchange = Exchange(self, self.workers if self.workers else RouterCounts(self.router))
        self.agent_mounts.append(self.exchange.mount)
        # Set to stop this control plane as SIGTERM does: an upgrade that put the new program in place.
        self.stop_requested = asyncio.Event()
        self.upgrades = UpgradeMachine(self)
        self.agent_mounts.append(self.upgrades.mount)
        self.upgrader = Upgrader(self)
        # Batches' lines are sent by the leader through its own router (docs/batches.md); with workers
        # this process has none, and the first worker sends them (control/workers/worker.py).
        self.batches = BatchRunner(self, leading=lambda: self.lease.leading) if self._router else None
        # Workflow runs likewise (docs/media.md).
        self.jobs = JobRunner(self, leading=lambda: self.lease.leading) if self._router else None
        # llmgw's own picture models, added by the leader where a node fits one (control/presets.py).
        self.presets = Presets(store, lambda: catalog_of(self), self.settings, leading=lambda: self.lease.leading,
                               policy=lambda: Policy(lost_after=float(self.settings.current.control.node_lost_after)))
        self._runners: list[web.AppRunner] = []

    @property
    def router(self) -> Router:
        """This process's router, which the client app serves through (llmgw.router.plane.ClientPlane).

        Only a plane without workers has one: with them each worker has its
        own, and this process builds no client app, so nothing asks here.
        """
        if self._router is None:
            raise RuntimeError("this control plane's worker processes route; it has no router of its own")
        return self._router

    def advertise(self) -> str:
        if self.cfg.advertise:
            return self.cfg.advertise
        host, port = self.sockets["client"].getsockname()[:2]
        if host in ("0.0.0.0", "::"):  # noqa: S104 - read, not bound
            host = socket.gethostname()
        return f"http://{host}:{port}"

    def answers_itself(self) -> bool:
        """Whether /v1 is answered here: on the leader, and on a standby following it (active-active)."""
        return self.lease.leading or self.exchange.fresh() or self.lease.cut_off

    def hub_client(self, hub: HubSettings) -> Hub:
        """The hub models are pinned through: hub.endpoint, over the cluster's TLS when it names a model mirror."""
        return hub_client(hub, self.settings.current.mirror, self.trust.client_context())

    def demand(self) -> Demand:
        """What every router of the cluster asks of placement: this machine's, and the standbys' in the exchange."""
        return Demand(*merged_asks([self.exchange.counts.asks(), self.exchange.asks()]))

    async def _seed_routes(self) -> None:
        """The catalog and the replicas the store lists as ready, probed: routed to before any agent reconnects.

        Without this a control plane knew the catalog's models only from its
        reconciler, as leader, once its agents had come back: a restarted
        leader answered "no model here" for 10.8 s (issue 9).
        """
        try:
            placed = await probed(await from_store(self.store, self.trust.engine_key or None, self.tokenizers.root))
        except StoreError as e:
            log.warning("the catalog could not be read from the store at start (%s); its models are known once "
                        "the leader's reconciler or the routing exchange says", e)
            return
        if placed:
            ready = sum(bool(p.replicas) for p in placed.values())
            log.info("the catalog from the store: %d model(s), %d with a replica that answers", len(placed), ready)
        self.routes.publish(Routes(placed))

    def _forget_person(self, person: Person) -> None:
        """A person suspended or reinstated here: their keys and chat credentials are read again at once."""
        self.keys.clear()
        self.chat.clear()

    def _leadership_changed(self, leading: bool) -> None:
        self._leader_gauge.set(1 if leading else 0)
        if leading:
            self.events.emit("leader_changed", subject=self.name, leader=self.name, address=self.advertise())
        self.cluster.leadership_changed(leading)
        if leading:
            self.presets.wake()
        if self.workers:
            self.workers.lease_changed()

    async def start(self, seed: ClusterSettings) -> None:
        await self.settings.load(seed, self.seeded_keys)
        self._settings_gauge.set(self.settings.version)
        for key, kind in missing_detectors(self.settings.current.guard):
            # Settings written when the plugin was there, or another control plane has it: said, not refused,
            # since refusing to start would take the gateway down over one rule.
            log.warning("%s: no installed plugin gives a detector of kind %r, so that rule checks nothing; "
                        "`llmgw doctor` lists the plugins", key, kind)
        self.settings.subscribe(lambda s: self._settings_gauge.set(self.settings.version))
        self.tracing.apply(self.settings.current.telemetry)
        self.settings.subscribe(lambda s: self.tracing.apply(s.telemetry))
        if self._router:
            self._router.apply(self.settings.current)
            self.settings.subscribe(self._router.apply)
            await self._router.start()
        self.settings.start(lambda: float(self.settings.current.control.settings_poll))
        await self.lease.reclaim()
        await self.lease.round()  # lead at once on a fresh store, not a third of a TTL later
        self.lease.start()
        self.notify.start()
        await self.trust.start(self.sockets["agent"], self.cfg.advertise)
        await self._seed_routes()
        if self.workers:
            # After the lease's first round and the catalog's seed, so the workers' /leader is
            # right from their start and they route to the catalog's replicas at once.
            await self.workers.start()
        # Built only for a port this process serves: with workers the client app lives in each
        # worker, and one built here too would register its connection metrics a second time.
        apps: dict[str, Callable[[], web.Application]] = {
            "client": lambda: make_client_app(self, self._client_extension()), "admin": lambda: make_admin_app(self),
            "agent": lambda: make_agent_app(self.trust, self.agent_mounts), "metrics": lambda: _metrics_app(self)}
        for role, sock in self.sockets.items():
            if role == "client" and self.workers:
                continue  # the workers serve it, on this socket and its siblings
            tls = None
            if role == "agent":
                tls = self.trust.ssl_context
                if tls is None:
                    # Refused connections, not a port that accepts and never
                    # answers: an agent moves on to the next control plane.
                    sock.close()
                    continue
            # handler_cancellation: a client that goes away cancels its
            # handler, which closes the request to the engine, which stops it.
            runner = web.AppRunner(apps[role](), access_log=None, handle_signals=False,
                                   handler_cancellation=(role == "client"))
            await runner.setup()
            await client_site(runner, sock, ssl_context=tls, backlog=LISTEN_BACKLOG).start()
            self._runners.append(runner)
        await self.cluster.start()
        self.tokenizers.start()
        self.exchange.start()
        self.ldap_sync.start()
        self.upgrader.start()
        if self.batches:
            self.batches.start()
        if self.jobs:
            self.jobs.start()
        self.presets.start()
        log.info("llmgw %s serving: %s", __version__,
                 ", ".join(f"{r} {a}" for r, a in self.listen_addresses.items()))
        # Serving: what a watchdog of an upgrade into this version waits for (docs/upgrade.md).
        confirm(self.cfg.data_dir, __version__)

    def _client_extension(self) -> Callable[[web.Application], None] | None:
        extend = self.extend
        return None if extend is None else (lambda app: extend(app, self))

    async def stop(self) -> None:
        if self.workers:
            # First, while the store is open and the lease held: their
            # requests finish and their usage rows are written.
            await self.workers.stop()
        if self.batches:
            await self.batches.stop()  # lines in flight stay pending, for whichever leads next
        if self.jobs:
            await self.jobs.stop()  # runs in flight stay running, for whichever leads next to queue again
        await self.upgrader.stop()
        await self.presets.stop()
        await self.tokenizers.stop()
        await self.exchange.stop()
        await self.ldap_sync.stop()
        await self.lease.stop(release=True)
        await self.settings.stop()
        await self.cluster.stop()
        await self.trust.stop()
        for runner in reversed(self._runners):
            await runner.cleanup()
        # After the listeners: requests still finishing above add their rows,
        # then every row is written before the store closes.
        if self._router:
            await self._router.stop()
        await self.notify.stop()
        await self.store.close()
        await asyncio.to_thread(self.tracing.shutdown)  # the last spans sent, the stop's own among them


def _metrics_app(plane: ControlPlane) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, plane.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    targets = ScrapeTargets(plane.store, plane.cfg.store)

    async def prometheus_targets(request: web.Request) -> web.Response:
        return web.json_response(await targets.groups())

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/prometheus/targets", prometheus_targets)
    return app


def take_ports(cfg: ServerConfig) -> dict[str, socket.socket]:
    sockets: dict[str, socket.socket] = {}
    try:
        for role in ("client", "agent", "admin", "metrics"):
            address = getattr(cfg.listen, role)
            if getattr(address, "off", False):
                continue
            sockets[role] = bind(role, address, shared=(role == "client" and cfg.workers > 1))
    except Exception:
        for sock in sockets.values():
            sock.close()
        raise
    return sockets


def worker_sockets(cfg: ServerConfig, sockets: dict[str, socket.socket]) -> list[socket.socket]:
    """One client socket per worker: the one take_ports checked, then its siblings on the same port."""
    if cfg.workers <= 1:
        return []
    first = sockets["client"]
    more: list[socket.socket] = []
    try:
        for _ in range(cfg.workers - 1):
            more.append(share_port(first, "client"))
    except Exception:
        for sock in more:
            sock.close()
        raise
    return [first, *more]


async def serve(cfg: ServerConfig, seeded_keys: list[str], plugins: Plugins | None = None,
                extend: ClientExtension | None = None) -> None:
    """Run a control plane until SIGINT or SIGTERM; `plugins` is what was loaded at start, for `ctl status`;
    `extend` adds routes to its client app (the workers' get theirs from `run_worker`)."""
    sockets = take_ports(cfg)
    shared: list[socket.socket] = []
    try:
        shared = worker_sockets(cfg, sockets)
        token = ensure_token(cfg.admin_token_path)
        store = await open_store(cfg.store)
    except BaseException:
        for sock in [*sockets.values(), *shared]:
            sock.close()
        raise
    plane = ControlPlane(cfg, store, token, sockets, seeded_keys, shared, plugins=plugins, extend=extend)
    stop = plane.stop_requested
    loop = asyncio.get_running_loop()
    stopsignals.take(loop, stop.set)
    try:
        await plane.start(cluster_part(cfg))
        heap.settle()  # after start: what start-up made is frozen out of every collection (llmgw/heap.py)
        print(announcement(plane.name, plane.sockets["client"].getsockname()[:2], plane.advertise(),
                           plane.listen_addresses.get("admin")), flush=True)
        await stop.wait()
        log.info("stopping")
    finally:
        await plane.stop()
