"""A worker process's side: serve the client API on its socket, report counts, hear the main process.

How the pool and its workers fit together is in llmgw/control/workers/__init__.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from llmgw import __version__, heap, stopsignals
from llmgw.accounting import Borrower
from llmgw.control.listeners import LISTEN_BACKLOG, client_site
from llmgw.control.routes import from_doc
from llmgw.control.workers.channel import Channel, WorkerFailed
from llmgw.control.workers.messages import (
    Borrow,
    Counts,
    Failed,
    Hello,
    KeysChanged,
    LeaseNow,
    Lent,
    Orphans,
    PartChanged,
    Ready,
    RoutesNow,
    Serve,
    Serving,
    Shared,
    Trip,
)
from llmgw.protocol import CachedBlocks
from llmgw.tasks import cancel_and_wait
from llmgw.telemetry import Tracing

if TYPE_CHECKING:
    from llmgw.account import ChatTokens, KeyCache, Principal, UnknownKeyThrottle
    from llmgw.config import ClusterSettings, ServerConfig
    from llmgw.control.settings import ClusterSettingsWatcher
    from llmgw.router import BatchRunner, JobRunner, Router
    from llmgw.store import Store

log = logging.getLogger("llmgw.workers")

SHARE_INTERVAL = 0.1  # seconds between a worker's reports of what it counted
METRICS_EVERY = 10  # reports: a worker's metrics travel once a second
LEASE_FRESH = 3.0  # a worker unheard from its main process this long stops saying it leads
WORKER_HEADER = "x-llmgw-worker"


def _samples(registry: CollectorRegistry) -> list[list[Any]]:
    out: list[list[Any]] = []
    for metric in registry.collect():
        samples = [[s.name, s.labels, s.value] for s in metric.samples if not s.name.endswith("_created")]
        out.append([metric.name, metric.type, metric.documentation, samples])
    return out


class SharedLease:
    """The main process's lease as a worker hears it: what /leader reads."""

    def __init__(self) -> None:
        from llmgw.control.lease import LeaseState

        self.state = LeaseState(False, None, True, time.monotonic())
        self._heard = 0.0
        self._answers = True

    @property
    def leading(self) -> bool:
        return self.state.leading and time.monotonic() - self._heard < LEASE_FRESH

    @property
    def answers(self) -> bool:
        """Whether this worker answers /v1 itself; unheard from its main process, it does as a leader would."""
        return self._answers or time.monotonic() - self._heard >= LEASE_FRESH

    def tell(self, message: LeaseNow) -> None:
        self._heard = time.monotonic()
        if message.answers != self._answers:
            log.info("this worker %s", "answers /v1 itself" if message.answers else "passes /v1 on to the leader")
        self._answers = message.answers
        if message.leading != self.state.leading:
            self.state.since = time.monotonic()
        self.state.leading = message.leading
        self.state.lease = message.lease


_Part = TypeVar("_Part")


def _made(part: _Part | None, what: str) -> _Part:
    if part is None:
        raise RuntimeError(f"a worker's {what} is made in Worker.start(), and it has not run")
    return part


class WorkerKeys:
    """A worker's key cache as its client app and portal see it (llmgw.portal.plane.DroppingKeys).

    A key the portal revokes in this worker, or limits it changes, must leave every worker's cache,
    not only this one's: what it drops goes to the main process too (KeysChanged), which drops it
    from its own and fans it out to every worker (FannedKeys in pool.py).
    """

    def __init__(self, cache: KeyCache, channel: Channel):
        self._cache = cache
        self._channel = channel

    def remembers(self, secret: str) -> bool:
        return self._cache.remembers(secret)

    async def lookup(self, secret: str) -> Principal | None:
        return await self._cache.lookup(secret)

    def invalidate(self, key_id: str) -> None:
        self._cache.invalidate(key_id)
        self._channel.send(KeysChanged(invalidate=key_id))

    def clear(self) -> None:
        self._cache.clear()
        self._channel.send(KeysChanged(clear=True))


class Worker:
    """One worker process: what the client app calls its plane (llmgw.router.plane.ClientPlane)."""

    def __init__(self, cfg: ServerConfig, index: int, channel: Channel, sockets: list[socket.socket],
                 extend: Callable[[web.Application, Any], None] | None = None):
        from llmgw.account import ChatTokens, KeyCache, UnknownKeyThrottle
        from llmgw.router import Router

        self.cfg = cfg
        self.extend = extend  # adds the portal's routes to the client app (control/plane.py ClientExtension)
        self.name = cfg.machine_name
        self.index = index
        self.channel = channel
        self.sockets = sockets  # every worker's, on the client port; sockets[index] is this one's
        self._adopted: dict[int, web.SockSite] = {}  # orphans' sockets accepted on for now
        self._adopting = asyncio.Lock()
        self._store: Store | None = None
        self.lease = SharedLease()
        self.registry = CollectorRegistry()
        # Each worker's own provider: spans are sent from the process that made them.
        self.tracing = Tracing("llmgw-server", f"{self.name}/worker-{index}", __version__)
        # The parts the client app reads, made in start() once the store is open; the app is built after
        # them, so it never meets one unmade (see the properties below).
        self._settings: ClusterSettingsWatcher | None = None
        self._keys: KeyCache | None = None
        self._chat: ChatTokens | None = None
        self._told_keys: WorkerKeys | None = None  # the same cache, telling the main process what it drops
        self._throttle: UnknownKeyThrottle | None = None
        self._router: Router | None = None
        self._KeyCache, self._Throttle, self._Router = KeyCache, UnknownKeyThrottle, Router
        self._ChatTokens = ChatTokens
        self._runner: web.AppRunner | None = None
        self._batches: BatchRunner | None = None  # the first worker's: it sends batches' lines while the plane leads
        self._jobs: JobRunner | None = None  # and runs the workflow jobs
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = asyncio.Event()  # the main process went away
        self._serve = asyncio.Event()  # the main process says: accept connections
        self.stopping = asyncio.Event()  # SIGTERM

    async def start(self, hello: Hello) -> None:
        from llmgw.config import own_secrets
        from llmgw.control.settings import ClusterSettingsWatcher
        from llmgw.router import make_client_app
        from llmgw.store import open_store

        store = self._store = await open_store(self.cfg.store)
        self._settings = ClusterSettingsWatcher(store)

        def current() -> ClusterSettings:
            return self.settings.current

        self._keys = self._KeyCache(store, ttl=lambda: float(current().auth.cache_ttl))
        self._chat = self._ChatTokens(store, ttl=lambda: float(current().auth.cache_ttl),
                                      idle=lambda: float(current().auth.session_idle))
        self._told_keys = WorkerKeys(self._keys, self.channel)
        self._throttle = self._Throttle(lambda: current().auth.unknown_key_rate)
        self._router = self._Router(store, current, self.registry, own_secrets=own_secrets(self.cfg),
                                    share=True, tracing=self.tracing)
        # What this worker's requests show (a guardrail's block, a budget spent, a key expired) is kept for
        # the webhooks as the main process's is; the leader's sender sends it.
        from llmgw.notify import Recorder

        self.router.events.subscribe(Recorder(store))
        self.settings.subscribe(self.router.apply)
        self.settings.subscribe(lambda s: self.tracing.apply(s.telemetry))
        self.router.registry.on_trip = lambda ident, reason: self.channel.send(
            Trip(ident, reason))
        # Read, never seeded: the main process wrote them before any worker started.
        await self.settings.refresh()
        if self.settings.version == 0:
            raise WorkerFailed("the cluster's settings could not be read from the store")
        self.tracing.apply(self.settings.current.telemetry)
        self.settings.start(lambda: float(current().control.settings_poll))
        self.router.limits.merge(hello.rate)
        if hello.workers > 1:
            self.router.limits.borrower = Borrower(lambda levels: self.channel.send(Borrow(levels)))
        self.lease.tell(hello.lease)
        self._routes(hello.routes)
        await self.router.start()
        self._tasks.append(asyncio.create_task(self._hear(), name="worker-hear"))
        extend = self.extend
        app = make_client_app(self, None if extend is None else (lambda app: extend(app, self)))
        mark = str(os.getpid())

        async def name_the_worker(request: web.Request, response: web.StreamResponse) -> None:
            response.headers[WORKER_HEADER] = mark

        app.on_response_prepare.append(name_the_worker)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        self._tasks.append(asyncio.create_task(self._report(), name="worker-report"))
        if self.index == 0:
            # The main process has no router: the first worker sends batches' lines (docs/batches.md).
            from llmgw.router import BatchRunner, JobRunner

            self._batches = BatchRunner(self, leading=lambda: self.lease.leading)
            self._batches.start()
            self._jobs = JobRunner(self, leading=lambda: self.lease.leading)
            self._jobs.start()
        self.channel.send(Ready(os.getpid()))
        waits = [asyncio.create_task(e.wait()) for e in (self._serve, self.closed, self.stopping)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if not self._serve.is_set():
            raise WorkerFailed("stopped before it was told to serve")
        await client_site(self._runner, self.sockets[self.index], backlog=LISTEN_BACKLOG).start()
        self.channel.send(Serving(os.getpid()))

    async def stop(self) -> None:
        if self._batches:
            await self._batches.stop()  # lines in flight stay pending, for whichever sends next
        if self._jobs:
            await self._jobs.stop()
        if self._runner:
            await self._runner.cleanup()
        await cancel_and_wait(*self._tasks)
        if self._router:
            # For the main's limiter, which a replacement starts from; its unspent loans go back too.
            self._send_counts(with_metrics=True, stopping=True)
            await self.router.stop()
            await self.router.events.drain()
        if self._settings:
            await self._settings.stop()
        if self._store:
            await self._store.close()
        await asyncio.to_thread(self.tracing.shutdown)
        await self.channel.close()

    @property
    def store(self) -> Store:
        return _made(self._store, "store")

    @property
    def settings(self) -> ClusterSettingsWatcher:
        return _made(self._settings, "settings")

    @property
    def keys(self) -> WorkerKeys:
        return _made(self._told_keys, "key cache")

    @property
    def chat(self) -> ChatTokens:
        return _made(self._chat, "chat credentials")

    @property
    def throttle(self) -> UnknownKeyThrottle:
        return _made(self._throttle, "unknown-key throttle")

    @property
    def router(self) -> Router:
        return _made(self._router, "router")

    def _send_counts(self, with_metrics: bool, stopping: bool = False) -> None:
        rate = self.router.limits.snapshot()
        spend = self.router.budgets.snapshot()
        borrower = self.router.limits.borrower
        returned = borrower.idle(float("inf") if stopping else None) if borrower else []
        if not (rate or spend or returned or with_metrics):
            return
        message = Counts(rate, spend, returned)
        if with_metrics:
            message.metrics = _samples(self.registry)
            message.asked, message.last_used = self.router.demand.read()
        self.channel.send(message)

    async def _report(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(SHARE_INTERVAL)
            beat += 1
            try:
                self._send_counts(with_metrics=beat % METRICS_EVERY == 1)
            except Exception:  # the reports must outlive one bad round
                log.exception("worker %d could not report its counts", self.index + 1)

    def _routes(self, message: RoutesNow) -> None:
        routes = from_doc(message.doc, message.key)
        self.router.registry.set_placed(routes.placed)
        self.router.registry.set_notes(routes.waits, routes.loading)

    def answers_itself(self) -> bool:
        return self.lease.answers

    async def _adopt(self, wanted: set[int]) -> None:
        """Accept on exactly these other workers' sockets besides this one's own."""
        async with self._adopting:
            if self._runner is None:
                return
            for i in sorted(set(self._adopted) - wanted):
                await self._adopted.pop(i).stop()
            for i in sorted(wanted - set(self._adopted)):
                # A copy of the descriptor: stopping the site closes it, and the socket stays open
                # in the main process and here for the next adoption.
                sock = self.sockets[i].dup()
                sock.setblocking(False)
                site = client_site(self._runner, sock, backlog=LISTEN_BACKLOG)
                await site.start()
                self._adopted[i] = site
            if wanted:
                log.info("accepting for worker(s) %s until they serve again",
                         ", ".join(str(i + 1) for i in sorted(wanted)))

    async def _hear(self) -> None:
        while True:
            message = await self.channel.receive()
            if message is None:
                self.closed.set()
                if self.router.limits.borrower:
                    self.router.limits.borrower.close()
                return
            if isinstance(message, Lent):
                if self.router.limits.borrower:
                    self.router.limits.borrower.answered(message.levels)
            elif isinstance(message, Shared):
                self.router.limits.merge(message.rate)
                self.router.budgets.merge(message.spend)
            elif isinstance(message, LeaseNow):
                self.lease.tell(message)
            elif isinstance(message, RoutesNow):
                self._routes(message)
            elif isinstance(message, CachedBlocks):
                self.router.registry.cached_blocks(message)
            elif isinstance(message, Trip):
                self.router.registry.trip(message.endpoint, message.reason)
            elif isinstance(message, Serve):
                self._serve.set()
            elif isinstance(message, Orphans):
                await self._adopt(set(message.sockets) - {self.index})
            elif isinstance(message, PartChanged):
                changed = getattr(self.extend, "changed", None)
                if changed is not None:
                    changed(message.part)
            elif isinstance(message, KeysChanged):
                # The cache itself, not self.keys: what the main process fans out is not told back to it.
                cache = _made(self._keys, "key cache")
                if message.clear:
                    cache.clear()
                elif message.invalidate:
                    cache.invalidate(message.invalidate)


async def run_worker(channel_fd: int, extend: Callable[[web.Application, Any], None] | None = None) -> int:
    """`llmgw server --worker-of FD`: serve the client API until SIGTERM or the main process goes away;
    `extend` adds routes to its client app, as `serve`'s does to the main process's."""
    from llmgw import logsetup
    from llmgw.config import ServerConfig, from_dict
    from llmgw.errors import explain

    loop = asyncio.get_running_loop()
    # A terminal's Ctrl-C reaches the whole process group; the main process
    # stops its workers in order, so the worker leaves SIGINT to it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = await Channel.open(socket.socket(fileno=channel_fd))
    hello = await channel.receive()
    if not isinstance(hello, Hello):
        return 1
    cfg = from_dict(ServerConfig, hello.config)
    logsetup.setup(cfg.log.level, cfg.log.format)
    index = hello.index
    _name_logs(index)
    sockets = [socket.socket(fileno=int(fd)) for fd in hello.listen_fds]
    for sock in sockets:
        sock.setblocking(False)
    worker = Worker(cfg, index, channel, sockets, extend)
    stop = worker.stopping
    stopsignals.take(loop, stop.set, (signal.SIGTERM,))
    try:
        try:
            await worker.start(hello)
        except Exception as e:  # told to the main process, which says it once
            sentence = str(e) if isinstance(e, WorkerFailed) else explain(e)
            if sentence is None:
                log.exception("worker %d failed to start", index + 1)
                sentence = f"unexpected {type(e).__name__}: {e} (this is a bug in llmgw)"
            channel.send(Failed(sentence))
            return 1
        heap.settle()  # as the main process does once started (llmgw/heap.py)
        closed = asyncio.create_task(worker.closed.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([closed, stopped], return_when=asyncio.FIRST_COMPLETED)
        if worker.closed.is_set() and not stop.is_set():
            log.warning("the main process went away; stopping")
        closed.cancel()
        stopped.cancel()
    finally:
        await worker.stop()
    return 0


def _name_logs(index: int) -> None:
    """Each worker's log lines say which worker wrote them: llmgw.router[w2]."""

    def name(record: logging.LogRecord) -> bool:
        record.name = f"{record.name}[w{index + 1}]"
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(name)
