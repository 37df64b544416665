"""Worker processes: the client API served by several processes of one machine.

One Python process answers from one core. With `workers: N` the client API
is served by N worker processes, each with its own event loop, store
connection, key cache, router (registry, admission, engine connections) and
usage writer, and the main process keeps everything there is one of: the
lease, the cluster settings' seeding, the admin API, the agent port and
/metrics. The main process also restarts a worker that dies.

Ports. The main process takes the client port exactly as a single process
does (bind without SO_REUSEPORT, so a second `llmgw server` on the machine,
with workers or without, is refused with the usual sentence), then marks it
SO_REUSEPORT and opens one more socket on it per further worker. The kernel
deals each new connection to one socket of the group by a hash of its
addresses, so idle workers share the load evenly: one socket shared by all,
as gunicorn does, was tried and gave every request to the same worker while
the others slept, since the first worker woken for a connection takes it.

Every worker inherits every socket, and accepts on its own. The main
process keeps them all open for its whole life, so a socket's queue
outlives its worker: connections the kernel dealt to a worker that died,
was killed or is restarting wait in that queue, and the main process at
once tells the serving workers to accept on it too (an "orphan") until the
replacement serves. So the port is never unguarded and no connection the
kernel accepted is refused or reset; a worker's death costs only the
connections it had already taken.

Counts. Every 100 ms (SHARE_INTERVAL) each worker sends the main process
what it counted since its last report: its RateLimiter's and its Budgets'
snapshot() deltas, one message over a unix socket, never a message per
request. The main process gathers the reports that arrive within 10 ms of
each other and sends each worker the others' deltas, which it merges
(RateLimiter.merge, Budgets.merge). This is active-active control planes'
exchange (every 2 s, through the leader) on one machine and at a
twentieth of the interval. For requests a minute that was not enough: a
burst of 200 at once got 60 through each worker before either heard of the
other. So a worker admits a request only with a loan from the main
process's minute, asked for over the same socket ("borrow", answered
"lent") and spent without asking again; a report's counts settle the loans
they spent and give back the ones idle for a second (accounting/lending.py).
Within the machine a burst is held to the limit. Tokens and budgets, known
only after an answer, keep the sharing's bound: what the workers let
through in about 100 ms (up to 110 ms plus a busy loop's delay) before they
hear of each other. Budgets are also caught up from the store every 30 s; why that does
not count a worker's spend twice is in accounting/budgets.py. The main
process merges every report into a limiter of its own too, and a worker
that (re)starts is given its whole minute first: a restart does not hand
every key a fresh minute. Its budgets it reads from the store, missing what
the other workers have not written yet (half a second of rows) until their
shares arrive.

Metrics. Once a second a worker's report carries its registry's samples
(counters, histograms, and the gauges read at scrape time). The main
process's /metrics shows their sums: breakers and the usage writer's lag
show the largest worker's figure instead; a worker that exits leaves its
counters and histograms in the sums, so they never go backwards at a
restart. Figures are up to a second old.

Leadership. /leader and /health answer on the client port in the workers:
the main process tells them the lease's state on every change and every
half second; a worker that has not heard for 3 s stops saying it leads.

Keys. A key revoked or a limit changed through the admin API is dropped
from every worker's key cache at once, as it is from the main process's.

Stopping. SIGTERM (or SIGINT) to the main process sends SIGTERM to every
worker, which stops taking connections, finishes its requests and writes
its usage rows; then the main process stops the rest. A worker whose main
process goes away (its socket to it closes) stops the same way.
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
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric

from llmgw import heap
from llmgw.accounting.lending import Borrower, Lender
from llmgw.accounting.ratelimit import RateLimiter
from llmgw.control.exchange import merged_asks
from llmgw.control.listeners import LISTEN_BACKLOG, client_site
from llmgw.control.routes import from_doc, to_doc

log = logging.getLogger("llmgw.workers")

SHARE_INTERVAL = 0.1  # seconds between a worker's reports of what it counted
FORWARD_GATHER = 0.01  # reports this close together reach the other workers in one message
METRICS_EVERY = 10  # reports: a worker's metrics travel once a second
LEASE_EVERY = 0.5  # seconds between the main process's word on the lease
LEASE_FRESH = 3.0  # a worker unheard from its main process this long stops saying it leads
READY_TIMEOUT = 60.0  # a worker's first start: store, settings, budgets, then serving
STOP_TIMEOUT = 70.0  # aiohttp gives requests 60 s to finish, then the usage rows are written
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
HEALTHY_AFTER = 30.0  # a worker that ran this long starts the backoff afresh when it dies
LINE_LIMIT = 64 * 1024 * 1024  # one message; a first minute of counts can be large
SEND_BUFFER_MAX = 64 * 1024 * 1024  # a worker that reads nothing (stopped, stuck) is not queued for forever
WORKER_HEADER = "x-llmgw-worker"
OUTBOX_MAX = 200_000  # counts kept for other control planes while none takes them
# Gauges where a sum would say something false: the most open breaker and
# the oldest unwritten row are what an operator needs to see.
LARGEST = frozenset({"llmgw_breaker_state", "llmgw_usage_writer_lag_seconds"})


class WorkerFailed(Exception):
    """A worker could not start, as one sentence."""


def worker_command(channel_fd: int) -> list[str]:
    """This program again, as a worker. Under the zipapp that is the archive, not `-m llmgw`."""
    pyz = os.environ.get("LLMGW_PYZ")
    program = [sys.executable, pyz] if pyz else [sys.executable, "-m", "llmgw"]
    return [*program, "server", "--worker-of", str(channel_fd)]


class _Channel:
    """Newline-separated JSON messages over one end of a socketpair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self._full_said = False

    @classmethod
    async def open(cls, sock: socket.socket) -> "_Channel":
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
        return cls(reader, writer)

    def send(self, message: dict) -> None:
        if self.writer.is_closing():
            return
        if self.writer.transport.get_write_buffer_size() > SEND_BUFFER_MAX:
            if not self._full_said:
                log.warning("a worker's channel has %d MB unread; dropping messages to it until it reads",
                            SEND_BUFFER_MAX // (1024 * 1024))
                self._full_said = True
            return
        self._full_said = False
        self.writer.write(orjson.dumps(message) + b"\n")

    async def receive(self) -> dict | None:
        """The next message, or None once the other end has closed."""
        try:
            line = await self.reader.readline()
        except (ConnectionError, ValueError):  # ValueError: a line past LINE_LIMIT
            return None
        if not line:
            return None
        return orjson.loads(line)

    async def close(self) -> None:
        self.writer.close()
        try:
            # Bounded: under uvloop, waiting on a socket whose peer was
            # SIGKILLed was seen to never return.
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass


def _lease_message(plane) -> dict:
    keeper = plane.lease
    lease = keeper.state.lease
    # answers: whether /v1 is answered here or passed on to the leader (control/exchange.py).
    return {"t": "lease", "leading": keeper.leading, "answers": plane.answers_itself(),
            "lease": dataclasses.asdict(lease) if lease is not None else None}


# -- the main process ----------------------------------------------------------

@dataclasses.dataclass
class _Slot:
    index: int
    proc: asyncio.subprocess.Process | None = None
    channel: _Channel | None = None
    ready: bool = False
    started: asyncio.Future | None = None  # the first start's outcome
    rate: list = dataclasses.field(default_factory=list)  # the others' deltas not yet sent to this one
    spend: list = dataclasses.field(default_factory=list)
    metrics: list | None = None  # its last samples: [name, type, help, [[sample, labels, value], …]]
    asked: dict = dataclasses.field(default_factory=dict)  # its requests' demand, for placement
    last_used: dict = dataclasses.field(default_factory=dict)


class WorkerPool:
    """The main process's side: start, feed, watch and stop the workers."""

    def __init__(self, plane, sockets: list[socket.socket]):
        self.plane = plane
        self.sockets = sockets  # one per worker, all on the client port
        self.slots = [_Slot(i) for i in range(len(sockets))]
        self.limits = RateLimiter()  # every worker's counts, for a worker that (re)starts
        self.lender = Lender(self.limits, len(self.slots))  # what each worker may admit (accounting/lending.py)
        self.routes = PoolRoutes(self)
        self._outbox: list = []  # the workers' counts not yet taken for other control planes
        self._stopping = asyncio.Event()
        self._serving = False  # every worker of the first start is ready: they were told to accept
        self._tasks: list[asyncio.Task] = []
        self._lease_task: asyncio.Task | None = None
        self._forward: asyncio.TimerHandle | None = None
        # Counters and histograms of workers that exited, kept in the sums.
        self._retired: dict[str, list] = {}
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
        for slot in self.slots:
            slot.started = loop.create_future()
            self._tasks.append(asyncio.create_task(self._supervise(slot), name=f"worker-{slot.index + 1}"))
        self._lease_task = asyncio.create_task(self._tell_lease(), name="workers-lease")
        try:
            await asyncio.wait_for(asyncio.gather(*(s.started for s in self.slots)), READY_TIMEOUT)
        except asyncio.TimeoutError:
            await self.stop()
            raise WorkerFailed(f"the worker processes did not start serving within {READY_TIMEOUT:.0f} s; "
                               "the log above says what they were waiting for") from None
        except WorkerFailed:
            await self.stop()
            raise
        self._serving = True
        self._broadcast({"t": "serve"})
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
        if self._lease_task:
            self._lease_task.cancel()
            await asyncio.gather(self._lease_task, return_exceptions=True)
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
            if not served and not slot.started.done():
                # Its first start: the server does not come up half-served.
                slot.started.set_exception(WorkerFailed(f"worker {slot.index + 1} {failure}"))
                return
            if time.monotonic() - began > HEALTHY_AFTER:
                backoff = BACKOFF_FIRST
            self._restarts.inc()
            log.warning("worker %d %s; starting another in %.1f s", slot.index + 1, failure, backoff)
            try:
                await asyncio.wait_for(self._stopping.wait(), backoff)
            except asyncio.TimeoutError:
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
        channel = await _Channel.open(parent)
        # No await from here to the registration: every count the main
        # limiter holds is in the hello, every later one is forwarded.
        channel.send({**_lease_message(self.plane), "t": "hello", "index": slot.index,
                      "workers": len(self.slots), "listen_fds": fds,
                      "config": _config_doc(self.plane.cfg), "rate": self.limits.counts(),
                      "routes": self.routes.message()})
        slot.channel, slot.rate, slot.spend = channel, [], []
        said = None
        try:
            while True:
                message = await channel.receive()
                if message is None:
                    break
                kind = message.get("t")
                if kind == "counts":
                    self._counted(slot, message)
                elif kind == "borrow":
                    channel.send({"t": "lent", "levels": self.lender.lend(slot.index, message.get("levels") or [])})
                elif kind == "ready":
                    # Set up, not yet accepting: every worker of the first start accepts only once all
                    # are ready, so /health's first 200 means the whole pool serves. A replacement
                    # accepts at once.
                    if self._serving:
                        channel.send({"t": "serve"})
                    elif not slot.started.done():
                        slot.started.set_result(None)
                elif kind == "serving":
                    slot.ready = True
                    self._running.set(sum(s.ready for s in self.slots))
                    log.info("worker %d (pid %d) serves the client API", slot.index + 1, pid)
                    self._tell_orphans()
                elif kind == "trip":
                    # A replica failing for one worker is passed over by all, not found out N times.
                    for other in self.slots:
                        if other is not slot and other.channel is not None:
                            other.channel.send(message)
                elif kind == "failed":
                    said = message.get("message")
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

    def _counted(self, slot: _Slot, message: dict) -> None:
        rate = message.get("rate") or []
        spend = message.get("spend") or []
        if "metrics" in message:
            slot.metrics = message["metrics"]
        if "asked" in message:
            slot.asked, slot.last_used = message["asked"] or {}, message.get("last_used") or {}
        self.lender.returned(slot.index, message.get("returned") or [])
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
            slot.channel.send({"t": "counts", "rate": slot.rate, "spend": slot.spend})
            slot.rate, slot.spend = [], []

    # this machine's counts, for active-active control planes (control/exchange.py Counts)

    def take(self) -> list[list]:
        taken, self._outbox = self._outbox, []
        return taken

    def whole(self) -> list[list]:
        return self.limits.counts()

    def absorb(self, rate: list[list]) -> None:
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
                slot.channel.send({"t": "orphans", "sockets": orphans})

    def lease_changed(self) -> None:
        self._broadcast(_lease_message(self.plane))

    async def _tell_lease(self) -> None:
        while True:
            await asyncio.sleep(LEASE_EVERY)
            self.lease_changed()

    def keys_changed(self, key_id: str | None) -> None:
        """A key revoked (its id) or every key's limits changed (None): drop them from every worker's cache."""
        self._broadcast({"t": "keys", "invalidate": key_id} if key_id else {"t": "keys", "clear": True})

    def _broadcast(self, message: dict) -> None:
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

    def set_placed(self, placed: dict) -> None:
        self._pool._broadcast(self.message())

    def set_notes(self, waits: dict[str, str], loading: dict[str, str]) -> None:
        self._pool._broadcast(self.message())

    def message(self) -> dict:
        # The board has taken the change before it tells its sink. The engines' key goes to the
        # workers over their own socketpair; it never leaves the machine.
        current = self._pool.plane.routes.current
        key = next((p.api_key for p in current.placed.values() if p.api_key), None)
        return {"t": "routes", "key": key, **to_doc(current)}


class _SummedMetrics:
    """The workers' metrics as one process's: what the main process's /metrics shows."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool

    def collect(self):
        families: dict[str, list] = {name: [kind, doc, dict(values)]
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


def _samples(registry: CollectorRegistry) -> list:
    out = []
    for metric in registry.collect():
        samples = [[s.name, s.labels, s.value] for s in metric.samples if not s.name.endswith("_created")]
        out.append([metric.name, metric.type, metric.documentation, samples])
    return out


def _config_doc(cfg) -> dict:
    from llmgw.config.loader import to_dict

    return to_dict(cfg)


class FannedKeys:
    """The main process's key cache, for the admin API: what it drops, every worker drops too."""

    def __init__(self, cache, pool: WorkerPool):
        self._cache = cache
        self._pool = pool

    def invalidate(self, key_id: str) -> None:
        self._cache.invalidate(key_id)
        self._pool.keys_changed(key_id)

    def clear(self) -> None:
        self._cache.clear()
        self._pool.keys_changed(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


# -- a worker ------------------------------------------------------------------

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

    def tell(self, message: dict) -> None:
        from llmgw.store import Lease

        self._heard = time.monotonic()
        answers = bool(message.get("answers", True))
        if answers != self._answers:
            log.info("this worker %s", "answers /v1 itself" if answers else "passes /v1 on to the leader")
        self._answers = answers
        leading = bool(message.get("leading"))
        if leading != self.state.leading:
            self.state.since = time.monotonic()
        self.state.leading = leading
        lease = message.get("lease")
        self.state.lease = Lease(**lease) if lease else None


class Worker:
    """One worker process: what the client app calls its plane."""

    def __init__(self, cfg, index: int, channel: _Channel, sockets: list[socket.socket]):
        from llmgw.account.keycache import KeyCache
        from llmgw.account.throttle import UnknownKeyThrottle
        from llmgw.router.service import Router

        self.cfg = cfg
        self.name = cfg.machine_name
        self.index = index
        self.channel = channel
        self.sockets = sockets  # every worker's, on the client port; sockets[index] is this one's
        self._adopted: dict[int, web.SockSite] = {}  # orphans' sockets accepted on for now
        self._adopting = asyncio.Lock()
        self.store = None
        self.settings = None
        self.lease = SharedLease()
        self.registry = CollectorRegistry()
        self.keys = self.throttle = self.router = None
        self._KeyCache, self._Throttle, self._Router = KeyCache, UnknownKeyThrottle, Router
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self.closed = asyncio.Event()  # the main process went away
        self._serve = asyncio.Event()  # the main process says: accept connections
        self.stopping = asyncio.Event()  # SIGTERM

    async def start(self, hello: dict) -> None:
        from llmgw.config.keyfiles import own_secrets
        from llmgw.control.settings import ClusterSettingsWatcher
        from llmgw.router.app import make_client_app
        from llmgw.store import open_store

        self.store = await open_store(self.cfg.store)
        self.settings = ClusterSettingsWatcher(self.store)
        current = lambda: self.settings.current  # noqa: E731
        self.keys = self._KeyCache(self.store, ttl=lambda: float(current().auth.cache_ttl))
        self.throttle = self._Throttle(lambda: current().auth.unknown_key_rate)
        self.router = self._Router(self.store, current, self.registry, own_secrets=own_secrets(self.cfg),
                                   share=True)
        self.settings.subscribe(self.router.apply)
        self.router.registry.on_trip = lambda ident, reason: self.channel.send(
            {"t": "trip", "endpoint": ident, "reason": reason})
        # Read, never seeded: the main process wrote them before any worker started.
        await self.settings.refresh()
        if self.settings.version == 0:
            raise WorkerFailed("the cluster's settings could not be read from the store")
        self.settings.start(lambda: float(current().control.settings_poll))
        self.router.limits.merge(hello.get("rate") or [])
        if int(hello.get("workers") or 1) > 1:
            self.router.limits.borrower = Borrower(self.channel.send)
        self.lease.tell(hello)
        self._routes(hello["routes"])
        await self.router.start()
        self._tasks.append(asyncio.create_task(self._hear(), name="worker-hear"))
        app = make_client_app(self)
        mark = str(os.getpid())

        async def name_the_worker(request: web.Request, response: web.StreamResponse) -> None:
            response.headers[WORKER_HEADER] = mark

        app.on_response_prepare.append(name_the_worker)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        self._tasks.append(asyncio.create_task(self._report(), name="worker-report"))
        self.channel.send({"t": "ready", "pid": os.getpid()})
        waits = [asyncio.create_task(e.wait()) for e in (self._serve, self.closed, self.stopping)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if not self._serve.is_set():
            raise WorkerFailed("stopped before it was told to serve")
        await client_site(self._runner, self.sockets[self.index], backlog=LISTEN_BACKLOG).start()
        self.channel.send({"t": "serving", "pid": os.getpid()})

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.router:
            # For the main's limiter, which a replacement starts from; its unspent loans go back too.
            self._send_counts(with_metrics=True, stopping=True)
            await self.router.stop()
        if self.settings:
            await self.settings.stop()
        if self.store:
            await self.store.close()
        await self.channel.close()

    def _send_counts(self, with_metrics: bool, stopping: bool = False) -> None:
        rate = self.router.limits.snapshot()
        spend = self.router.budgets.snapshot()
        borrower = self.router.limits.borrower
        returned = borrower.idle(float("inf") if stopping else None) if borrower else []
        if not (rate or spend or returned or with_metrics):
            return
        message: dict[str, Any] = {"t": "counts", "rate": rate, "spend": spend}
        if returned:
            message["returned"] = returned
        if with_metrics:
            message["metrics"] = _samples(self.registry)
            message["asked"], message["last_used"] = self.router.demand.read()
        self.channel.send(message)

    async def _report(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(SHARE_INTERVAL)
            beat += 1
            try:
                self._send_counts(with_metrics=beat % METRICS_EVERY == 1)
            except Exception:  # noqa: BLE001 - the reports must outlive one bad round
                log.exception("worker %d could not report its counts", self.index + 1)

    def _routes(self, message: dict) -> None:
        routes = from_doc(message, message.get("key"))
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
                log.info("accepting for worker(s) %s until they serve again", ", ".join(str(i + 1) for i in sorted(wanted)))

    async def _hear(self) -> None:
        while True:
            message = await self.channel.receive()
            if message is None:
                self.closed.set()
                if self.router.limits.borrower:
                    self.router.limits.borrower.close()
                return
            kind = message.get("t")
            if kind == "lent":
                self.router.limits.borrower.answered(message.get("levels") or [])
            elif kind == "counts":
                self.router.limits.merge(message.get("rate") or [])
                self.router.budgets.merge(message.get("spend") or [])
            elif kind == "lease":
                self.lease.tell(message)
            elif kind == "routes":
                self._routes(message)
            elif kind == "trip":
                self.router.registry.trip(str(message.get("endpoint")), str(message.get("reason") or ""))
            elif kind == "serve":
                self._serve.set()
            elif kind == "orphans":
                await self._adopt({int(i) for i in message.get("sockets") or []} - {self.index})
            elif kind == "keys":
                if message.get("clear"):
                    self.keys.clear()
                elif message.get("invalidate"):
                    self.keys.invalidate(message["invalidate"])


async def run_worker(channel_fd: int) -> int:
    """`llmgw server --worker-of FD`: serve the client API until SIGTERM or the main process goes away."""
    from llmgw import logsetup
    from llmgw.config.loader import from_dict
    from llmgw.config.server import ServerConfig
    from llmgw.errors import explain

    loop = asyncio.get_running_loop()
    # A terminal's Ctrl-C reaches the whole process group; the main process
    # stops its workers in order, so the worker leaves SIGINT to it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = await _Channel.open(socket.socket(fileno=channel_fd))
    hello = await channel.receive()
    if hello is None or hello.get("t") != "hello":
        return 1
    cfg = from_dict(ServerConfig, hello["config"])
    logsetup.setup(cfg.log.level, cfg.log.format)
    index = int(hello["index"])
    _name_logs(index)
    sockets = [socket.socket(fileno=int(fd)) for fd in hello["listen_fds"]]
    for sock in sockets:
        sock.setblocking(False)
    worker = Worker(cfg, index, channel, sockets)
    stop = worker.stopping
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        try:
            await worker.start(hello)
        except Exception as e:  # noqa: BLE001 - told to the main process, which says it once
            sentence = str(e) if isinstance(e, WorkerFailed) else explain(e)
            if sentence is None:
                log.exception("worker %d failed to start", index + 1)
                sentence = f"unexpected {type(e).__name__}: {e} (this is a bug in llmgw)"
            channel.send({"t": "failed", "message": sentence})
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
