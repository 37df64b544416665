"""The main process's side of the workers: start them, feed them, watch them, stop them.

How the pool and its workers fit together is in llmgw/control/workers/__init__.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric

from llmgw.account import KeyCache, Principal
from llmgw.accounting import Lender, RateLimiter
from llmgw.control.exchange import merged_asks
from llmgw.control.routes import to_doc
from llmgw.control.workers.channel import Channel, WorkerFailed
from llmgw.control.workers.messages import (
    Borrow,
    Counts,
    Failed,
    Hello,
    KeysChanged,
    LeaseNow,
    Lent,
    Message,
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

if TYPE_CHECKING:
    from llmgw.config import ServerConfig
    from llmgw.control.plane import ControlPlane
    from llmgw.router import Placed

log = logging.getLogger("llmgw.workers")

FORWARD_GATHER = 0.01  # reports this close together reach the other workers in one message
LEASE_EVERY = 0.5  # seconds between the main process's word on the lease
READY_TIMEOUT = 60.0  # a worker's first start: store, settings, budgets, then serving
STOP_TIMEOUT = 70.0  # aiohttp gives requests 60 s to finish, then the usage rows are written
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
HEALTHY_AFTER = 30.0  # a worker that ran this long starts the backoff afresh when it dies
OUTBOX_MAX = 200_000  # counts kept for other control planes while none takes them
# Gauges where a sum would say something false: the most open breaker and
# the oldest unwritten row are what an operator needs to see.
LARGEST = frozenset({"llmgw_breaker_state", "llmgw_usage_writer_lag_seconds",
                     # Every worker counts the others' spend too (budgets are shared): summing would multiply it.
                     "llmgw_budget_spent_ratio"})


def worker_command(channel_fd: int) -> list[str]:
    """This program again, as a worker. Under the zipapp that is the archive, not `-m llmgw`."""
    pyz = os.environ.get("LLMGW_PYZ")
    program = [sys.executable, pyz] if pyz else [sys.executable, "-m", "llmgw"]
    return [*program, "server", "--worker-of", str(channel_fd)]


def _lease_message(plane: ControlPlane) -> LeaseNow:
    keeper = plane.lease
    return LeaseNow(keeper.leading, plane.answers_itself(), keeper.state.lease)


# -- the main process ----------------------------------------------------------

@dataclasses.dataclass
class _Slot:
    index: int
    proc: asyncio.subprocess.Process | None = None
    channel: Channel | None = None
    ready: bool = False
    started: asyncio.Future[None] | None = None  # the first start's outcome, made by WorkerPool.start
    rate: list[Any] = dataclasses.field(default_factory=list)  # the others' deltas not yet sent to this one
    spend: list[Any] = dataclasses.field(default_factory=list)
    metrics: list[Any] | None = None  # its last samples: [name, type, help, [[sample, labels, value], …]]
    asked: dict[str, float] = dataclasses.field(default_factory=dict)  # its requests' demand, for placement
    last_used: dict[str, float] = dataclasses.field(default_factory=dict)

    def first_start(self) -> asyncio.Future[None]:
        """The first start's outcome: made with a running loop by WorkerPool.start, before it supervises the slot."""
        if self.started is None:
            raise RuntimeError(f"worker {self.index + 1} is supervised before the pool's start() made its future")
        return self.started


class WorkerPool:
    """The main process's side: start, feed, watch and stop the workers."""

    def __init__(self, plane: ControlPlane, sockets: list[socket.socket]):
        self.plane = plane
        self.sockets = sockets  # one per worker, all on the client port
        self.slots = [_Slot(i) for i in range(len(sockets))]
        self.limits = RateLimiter()  # every worker's counts, for a worker that (re)starts
        self.lender = Lender(self.limits, len(self.slots))  # what each worker may admit (accounting/lending.py)
        self.routes = PoolRoutes(self)
        self._outbox: list[Any] = []  # the workers' counts not yet taken for other control planes
        self._stopping = asyncio.Event()
        self._serving = False  # every worker of the first start is ready: they were told to accept
        self._tasks: list[asyncio.Task[None]] = []
        self._lease_task: asyncio.Task[None] | None = None
        self._forward: asyncio.TimerHandle | None = None
        # Counters and histograms of workers that exited, kept in the sums.
        self._retired: dict[str, list[Any]] = {}
        registry: CollectorRegistry = plane.registry
        self._running = Gauge("llmgw_workers_running", "Worker processes serving the client API",
                              registry=registry)
        self._restarts = Counter("llmgw_worker_restarts", "Worker processes started again after one died",
                                 registry=registry)
        registry.register(_SummedMetrics(self))

    # starting and stopping

    async def start(self) -> None:
        """Start every worker and return once each serves; WorkerFailed if one cannot."""
        loop = asyncio.get_running_loop()
        started: list[asyncio.Future[None]] = []
        for slot in self.slots:
            slot.started = loop.create_future()
            started.append(slot.started)
            self._tasks.append(asyncio.create_task(self._supervise(slot), name=f"worker-{slot.index + 1}"))
        self._lease_task = asyncio.create_task(self._tell_lease(), name="workers-lease")
        try:
            await asyncio.wait_for(asyncio.gather(*started), READY_TIMEOUT)
        except TimeoutError:
            await self.stop()
            raise WorkerFailed(f"the worker processes did not start serving within {READY_TIMEOUT:.0f} s; "
                               "the log above says what they were waiting for") from None
        except WorkerFailed:
            await self.stop()
            raise
        self._serving = True
        self._broadcast(Serve())
        log.info("%d workers serve the client API", len(self.slots))

    async def stop(self) -> None:
        """SIGTERM to every worker, and wait while they finish their requests and write their usage."""
        self._stopping.set()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.returncode is None:
                slot.proc.send_signal(signal.SIGTERM)
        if self._tasks:
            done, pending = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT)
            for slot in self.slots:
                if slot.proc is not None and slot.proc.returncode is None:
                    log.error("worker %d (pid %d) did not stop within %.0f s; killing it",
                              slot.index + 1, slot.proc.pid, STOP_TIMEOUT)
                    slot.proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=10)
            for task in pending:
                task.cancel()
        await cancel_and_wait(self._lease_task)
        if self._forward:
            self._forward.cancel()
        for sock in self.sockets:
            sock.close()

    async def _supervise(self, slot: _Slot) -> None:
        try:
            await self._keep_running(slot)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            # A bug of ours: said once, loudly, rather than a worker silently never restarted.
            log.exception("worker %d is no longer watched", slot.index + 1)
            if slot.started is not None and not slot.started.done():
                slot.started.set_exception(WorkerFailed(f"worker {slot.index + 1} could not be started: {e}"))

    async def _keep_running(self, slot: _Slot) -> None:
        backoff = BACKOFF_FIRST
        while not self._stopping.is_set():
            began = time.monotonic()
            served, failure = await self._run_once(slot)
            if self._stopping.is_set():
                break
            if not served and not slot.first_start().done():
                # Its first start: the server does not come up half-served.
                slot.first_start().set_exception(WorkerFailed(f"worker {slot.index + 1} {failure}"))
                return
            if time.monotonic() - began > HEALTHY_AFTER:
                backoff = BACKOFF_FIRST
            self._restarts.inc()
            log.warning("worker %d %s; starting another in %.1f s", slot.index + 1, failure, backoff)
            try:
                await asyncio.wait_for(self._stopping.wait(), backoff)
            except TimeoutError:
                pass
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _run_once(self, slot: _Slot) -> tuple[bool, str]:
        """One life of a worker: whether it served, and how it ended, as words for the log."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [sock.fileno() for sock in self.sockets]
        try:
            slot.proc = await asyncio.create_subprocess_exec(
                *worker_command(child.fileno()), pass_fds=(child.fileno(), *fds),
                stdin=asyncio.subprocess.DEVNULL)
        except OSError as e:
            parent.close()
            return False, f"could not be started ({e.strerror or e})"
        finally:
            child.close()
        pid = slot.proc.pid
        if self._stopping.is_set():
            slot.proc.send_signal(signal.SIGTERM)  # started as stop() was signalling the others
        channel = await Channel.open(parent)
        # No await from here to the registration: every count the main
        # limiter holds is in the hello, every later one is forwarded.
        channel.send(Hello(index=slot.index, workers=len(self.slots), listen_fds=fds,
                           config=_config_doc(self.plane.cfg), lease=_lease_message(self.plane),
                           routes=self.routes.message(), rate=self.limits.counts()))
        slot.channel, slot.rate, slot.spend = channel, [], []
        said = None
        try:
            while True:
                message = await channel.receive()
                if message is None:
                    break
                if isinstance(message, Counts):
                    self._counted(slot, message)
                elif isinstance(message, Borrow):
                    channel.send(Lent(self.lender.lend(slot.index, message.levels)))
                elif isinstance(message, Ready):
                    # Set up, not yet accepting: every worker of the first start accepts only once all
                    # are ready, so /health's first 200 means the whole pool serves. A replacement
                    # accepts at once.
                    if self._serving:
                        channel.send(Serve())
                    elif not slot.first_start().done():
                        slot.first_start().set_result(None)
                elif isinstance(message, Serving):
                    slot.ready = True
                    self._running.set(sum(s.ready for s in self.slots))
                    log.info("worker %d (pid %d) serves the client API", slot.index + 1, pid)
                    self._tell_orphans()
                elif isinstance(message, Trip):
                    # A replica failing for one worker is passed over by all, not found out N times.
                    for other in self.slots:
                        if other is not slot and other.channel is not None:
                            other.channel.send(message)
                elif isinstance(message, KeysChanged):
                    self.heard_keys_changed(message)
                elif isinstance(message, Failed):
                    said = message.message
        finally:
            slot.channel = None
            slot.rate, slot.spend = [], []
            self.lender.forget(slot.index)
            served, slot.ready = slot.ready, False
            # Its channel closes as it dies: the others take its socket's queue now, not after
            # the process is reaped and a replacement has started.
            self._tell_orphans()
            await channel.close()
        code = await slot.proc.wait()
        self._retire(slot)
        self._running.set(sum(s.ready for s in self.slots))
        if said:
            return served, f"could not start: {said}"
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        if not served:
            return served, f"(pid {pid}) {how} before it served; what it said is above"
        return served, f"(pid {pid}) {how}"

    # the exchange

    def _counted(self, slot: _Slot, message: Counts) -> None:
        rate, spend = message.rate, message.spend
        if message.metrics is not None:
            slot.metrics = message.metrics
        if message.asked is not None:
            slot.asked, slot.last_used = message.asked, message.last_used or {}
        self.lender.returned(slot.index, message.returned)
        if rate:
            self.limits.merge(rate)
            self.lender.spent(slot.index, rate)  # counted now, no longer only lent
            self._outbox.extend(rate)
            if len(self._outbox) > OUTBOX_MAX:
                del self._outbox[:len(self._outbox) - OUTBOX_MAX]
        if not rate and not spend:
            return
        for other in self.slots:
            if other is slot or other.channel is None:
                continue
            other.rate.extend(rate)
            other.spend.extend(spend)
        if self._forward is None:
            self._forward = asyncio.get_running_loop().call_later(FORWARD_GATHER, self._send_counts)

    def _send_counts(self) -> None:
        self._forward = None
        for slot in self.slots:
            if slot.channel is None or not (slot.rate or slot.spend):
                continue
            slot.channel.send(Shared(slot.rate, slot.spend))
            slot.rate, slot.spend = [], []

    # this machine's counts, for active-active control planes (control/exchange.py Counts)

    def take(self) -> list[list[Any]]:
        taken, self._outbox = self._outbox, []
        return taken

    def whole(self) -> list[list[Any]]:
        return self.limits.counts()

    def absorb(self, rate: list[list[Any]]) -> None:
        """Other control planes' counts: into this process's limiter and every worker's."""
        if not rate:
            return
        self.limits.merge(rate)
        for slot in self.slots:
            if slot.channel is not None:
                slot.rate.extend(rate)
        if self._forward is None:
            self._forward = asyncio.get_running_loop().call_later(FORWARD_GATHER, self._send_counts)

    def asks(self) -> tuple[dict[str, float], dict[str, float]]:
        return merged_asks((slot.asked, slot.last_used) for slot in self.slots)

    def _tell_orphans(self) -> None:
        """Every serving worker accepts on the sockets whose own worker does not serve."""
        if not self._serving or self._stopping.is_set():
            return
        orphans = [slot.index for slot in self.slots if not slot.ready]
        for slot in self.slots:
            if slot.ready and slot.channel is not None:
                slot.channel.send(Orphans(orphans))

    def lease_changed(self) -> None:
        self._broadcast(_lease_message(self.plane))

    async def _tell_lease(self) -> None:
        while True:
            await asyncio.sleep(LEASE_EVERY)
            self.lease_changed()

    def heard_keys_changed(self, message: KeysChanged) -> None:
        """A worker's portal revoked a key or changed limits: drop it here, and so (FannedKeys) in every
        worker; other control planes read the store again within auth.cache_ttl."""
        if message.clear:
            self.plane.keys.clear()
        elif message.invalidate:
            self.plane.keys.invalidate(message.invalidate)

    def keys_changed(self, key_id: str | None) -> None:
        """A key revoked (its id) or every key's limits changed (None): drop them from every worker's cache."""
        self._broadcast(KeysChanged(invalidate=key_id) if key_id else KeysChanged(clear=True))

    def part_changed(self, part: str) -> None:
        """Something the client port's extension serves changed here (the MCP servers): every worker reads it."""
        self._broadcast(PartChanged(part))

    def _broadcast(self, message: Message) -> None:
        for slot in self.slots:
            if slot.channel is not None:
                slot.channel.send(message)

    # metrics

    def _retire(self, slot: _Slot) -> None:
        if not slot.metrics:
            return
        retired = {name: [kind, doc, dict(values)] for name, (kind, doc, values) in self._retired.items()}
        for name, kind, doc, samples in slot.metrics:
            if kind not in ("counter", "histogram"):
                continue
            family = retired.setdefault(name, [kind, doc, {}])
            for sample, labels, value in samples:
                key = (sample, tuple(sorted(labels.items())))
                family[2][key] = family[2].get(key, 0.0) + value
        self._retired = retired  # replaced whole: a scrape reads it from another thread
        slot.metrics = None


class PoolRoutes:
    """Every worker's registry as the RouteBoard's sink (control/routes.py): what the board holds goes to each."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool

    def set_placed(self, placed: dict[str, Placed]) -> None:
        self._pool._broadcast(self.message())

    def set_notes(self, waits: dict[str, str], loading: dict[str, str]) -> None:
        self._pool._broadcast(self.message())

    def cached_blocks(self, message: CachedBlocks) -> None:
        self._pool._broadcast(message)

    def message(self) -> RoutesNow:
        # The board has taken the change before it tells its sink. The engines' key goes to the
        # workers over their own socketpair; it never leaves the machine.
        current = self._pool.plane.routes.current
        key = next((p.api_key for p in current.placed.values() if p.api_key), None)
        return RoutesNow(to_doc(current), key)


class _SummedMetrics:
    """The workers' metrics as one process's: what the main process's /metrics shows."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        families: dict[str, list[Any]] = {name: [kind, doc, dict(values)]
                                     for name, (kind, doc, values) in self.pool._retired.items()}
        for source in [s.metrics for s in self.pool.slots]:
            if not source:
                continue
            for name, kind, doc, samples in source:
                family = families.setdefault(name, [kind, doc, {}])
                values = family[2]
                for sample, labels, value in samples:
                    key = (sample, tuple(sorted(labels.items())))
                    if name in LARGEST:
                        values[key] = max(values.get(key, value), value)
                    else:
                        values[key] = values.get(key, 0.0) + value
        for name, (kind, doc, values) in families.items():
            metric = Metric(name, doc, kind)
            for (sample, labels), value in values.items():
                metric.add_sample(sample, dict(labels), value)
            yield metric


def _samples(registry: CollectorRegistry) -> list[list[Any]]:
    out: list[list[Any]] = []
    for metric in registry.collect():
        samples = [[s.name, s.labels, s.value] for s in metric.samples if not s.name.endswith("_created")]
        out.append([metric.name, metric.type, metric.documentation, samples])
    return out


def _config_doc(cfg: ServerConfig) -> dict[str, Any]:
    from llmgw.config import to_dict

    doc: dict[str, Any] = to_dict(cfg)  # a dataclass's is always an object
    return doc


class FannedKeys:
    """The main process's key cache, for the admin API: what it drops, every worker drops too.

    It fits the plane's PlaneKeys as KeyCache does (llmgw/control/plane.py). With workers this process
    answers no /v1 request; its lookups go to its own cache, as KeyCache's would.
    """

    def __init__(self, cache: KeyCache, pool: WorkerPool):
        self._cache = cache
        self._pool = pool

    def remembers(self, secret: str) -> bool:
        return self._cache.remembers(secret)

    async def lookup(self, secret: str) -> Principal | None:
        return await self._cache.lookup(secret)

    def invalidate(self, key_id: str) -> None:
        self._cache.invalidate(key_id)
        self._pool.keys_changed(key_id)

    def clear(self) -> None:
        self._cache.clear()
        self._pool.keys_changed(None)
