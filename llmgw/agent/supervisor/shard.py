"""One engine the supervisor runs or adopted: its state, its output, and the tasks that watch it.

States, as the control plane reads them (llmgw.protocol ShardStatus):
starting → ready when the readiness check passes; draining when the agent
is told to drain; stopped when it ended because it was told to stop;
failed when it ended on its own (its exit code and last lines in the
message) or could not start. Whether to start it again is the control
plane's to decide: the supervisor only reports.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import psutil

from llmgw.agent.supervisor import procs, readiness, records
from llmgw.agent.supervisor.output import OutputFollower
from llmgw.agent.supervisor.records import ShardRecord
from llmgw.agent.supervisor.ring import LogRing, OutputLimits
from llmgw.protocol import LogLine, ShardLoad, ShardState, ShardStatus

log = logging.getLogger("llmgw.agent.supervisor")

FOLLOW_S = 0.25
"""How often the output file is read: what `ctl logs` lags the engine by."""
EXIT_POLL_S = 0.5
"""How often an adopted engine, which is not our child and so sends no SIGCHLD, is looked for."""
SAMPLE_S = 2.0
"""How often the engine's other processes are written down, for a stop after their parent died."""
LEFTOVER_GRACE_S = 5.0
"""How long what an engine left running after it ended on its own has to go, before it is killed."""
LAST_LINES = 10
_LAST_BYTES = 2000

Emit = Callable[[ShardStatus], Awaitable[None]]


class Shard:
    """An engine process group and what the agent knows of it. Made by Supervisor.start or .adopt."""

    def __init__(self, record: ShardRecord, data_dir: Path, limits: OutputLimits, *,
                 proc: asyncio.subprocess.Process | None, adopted: bool, emit: Emit,
                 session: Callable[[], aiohttp.ClientSession]):
        self.record = record
        self.shard_id = record.shard_id
        self.adopted = adopted
        self.ring = LogRing(limits)
        try:
            out = records.shard_dir(data_dir, record.shard_id) / records.OUTPUT
        except records.RecordError:
            out = None  # a start refused for its shard id: no directory, and no output
        self.follower = OutputFollower(out, self.ring, limits) if out is not None else None
        self.state: ShardState = "starting"
        self.message = ""
        self.exit_code: int | None = None
        self.since = time.time()
        self.stopping = False
        self.ended = asyncio.Event()
        self._data_dir = data_dir
        self._proc = proc
        self._emit = emit
        self._session = session
        self._leader = procs.Ident(record.pid, record.boot_start)
        self._known = [procs.Ident(p, t) for p, t in record.descendants]
        self._stop_done = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._load_procs: dict[int, psutil.Process] = {}

    # --- what the agent reads ---------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.record.pid

    def status(self) -> ShardStatus:
        return ShardStatus(shard_id=self.shard_id, state=self.state, model=self.record.model,
                           url=self.record.url, pid=self.record.pid, message=self.message,
                           exit_code=self.exit_code, since=self.since)

    def logs(self, lines: int | None = 200) -> list[LogLine]:
        """The engine's last lines of output, oldest first (read from its output file a moment ago)."""
        if self.follower is not None and not self.ended.is_set():
            self.follower.poll()
        return self.ring.lines(lines)

    async def wait(self) -> int | None:
        """Until the engine has ended and been reported; its exit code (None when it was adopted: not ours to reap)."""
        await self.ended.wait()
        return self.exit_code

    def processes(self) -> list[psutil.Process]:
        """The engine's live processes: leader, group, and the ones that left it."""
        if self.ended.is_set():
            return []
        return procs.engine_processes(self._leader, self.record.pgid, self._known)

    def load(self) -> ShardLoad:
        """CPU and memory of the engine's processes together; GPU memory is discovery's to add."""
        cpu, rss = 0.0, 0
        seen: dict[int, psutil.Process] = {}
        for p in self.processes():
            # The same psutil.Process each time: cpu_percent counts from its last call.
            q = self._load_procs.get(p.pid)
            if q is None or procs.gone(q):
                q = p
            seen[p.pid] = q
            try:
                with q.oneshot():
                    cpu += q.cpu_percent(None)
                    rss += q.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        self._load_procs = seen
        return ShardLoad(shard_id=self.shard_id, cpu_percent=round(cpu, 1), rss_mb=rss >> 20)

    # --- state changes ----------------------------------------------------------------------

    async def set_state(self, state: ShardState, message: str = "", exit_code: int | None = None) -> None:
        if state == self.state and message == self.message:
            return
        self.state, self.message, self.exit_code, self.since = state, message, exit_code, time.time()
        try:
            await self._emit(self.status())
        except Exception:  # the agent's callback failing must not leave the shard unwatched
            log.exception("reporting shard %s as %s failed", self.shard_id, state)

    def begin(self, ready_now: bool = False) -> None:
        """Start the tasks that follow the output, find readiness and notice the end."""
        self._tasks = [asyncio.create_task(self._follow(), name=f"shard {self.shard_id} output"),
                       asyncio.create_task(self._watch(), name=f"shard {self.shard_id} exit")]
        if not ready_now:
            self._tasks.append(asyncio.create_task(self._readiness(), name=f"shard {self.shard_id} ready"))

    def detach(self) -> None:
        """Stop watching and leave the engine running (the agent is going away; a new one adopts it)."""
        for t in self._tasks:
            t.cancel()

    async def terminate(self, grace_s: float) -> None:
        """SIGTERM to every process of the engine, SIGKILL to what is left after grace_s; until the end is reported."""
        self.stopping = True
        try:
            await terminate_engine(self._leader, self.record.pgid, self._known, self.record.mark, grace_s)
        finally:
            self._stop_done.set()
        try:
            await asyncio.wait_for(self.ended.wait(), timeout=10)
        except TimeoutError:
            log.warning("shard %s: pid %d still not seen to end after SIGKILL", self.shard_id, self.pid)

    # --- tasks ------------------------------------------------------------------------------

    def output(self) -> OutputFollower:
        """The engine's output file, which every shard that runs has: only a start refused for its shard id has
        none, and such a shard is never begun nor adopted."""
        if self.follower is None:
            raise RuntimeError(f"shard {self.shard_id} has no output file: its start was refused")
        return self.follower

    async def _follow(self) -> None:
        while not self.ended.is_set():
            self.output().poll()
            await asyncio.sleep(FOLLOW_S)

    async def _readiness(self) -> None:
        while self.state == "starting" and not self.ended.is_set():
            waiting = await readiness.check(self._session(), self.record.url, self.record.model,
                                            read_key(self.record.api_key_file), health_path=self.record.health_path)
            if not waiting and self.state == "starting" and not self.stopping and not self.ended.is_set():
                await self.set_state("ready")
                return
            if waiting != self.message and self.state == "starting":
                self.message = waiting  # said in the next status; not a change of state worth a message
            await asyncio.sleep(readiness.INTERVAL_S)

    async def _watch(self) -> None:
        code = await self._leader_exit()
        if self.stopping:
            await self._stop_done.wait()
        else:
            # Ended on its own: what it started must not stay holding the card.
            await terminate_engine(self._leader, self.record.pgid, self._known, self.record.mark,
                                   LEFTOVER_GRACE_S)
        self.output().poll()
        self.ring.flush()
        records.remove(self._data_dir, self.shard_id)
        for t in self._tasks:
            if t is not asyncio.current_task():
                t.cancel()
        if self.stopping:
            await self.set_state("stopped", _ended_words(code, self.adopted), code)
        else:
            await self.set_state("failed", self._failure(code), code)
        self.ended.set()

    async def _leader_exit(self) -> int | None:
        """Until the engine's first process ends: its exit code, or None for one we did not start."""
        sampled = 0.0
        # One wait for the whole life: a wait cancelled every few seconds leaves a waiter behind each time.
        exited = asyncio.ensure_future(self._proc.wait()) if self._proc is not None else None
        while True:
            if exited is not None:
                await asyncio.wait({exited}, timeout=SAMPLE_S)
                if exited.done():
                    return exited.result()
            else:
                if procs.find(self._leader) is None:
                    return None
                await asyncio.sleep(EXIT_POLL_S)
            now = time.monotonic()
            if now - sampled >= SAMPLE_S:
                sampled = now
                await asyncio.to_thread(self._sample_descendants)

    def _sample_descendants(self) -> None:
        try:
            now = procs.descendants(self._leader, self.record.pgid)
        except (psutil.Error, OSError) as e:  # a /proc read racing an exit: next time
            log.debug("shard %s: looking at its processes: %s", self.shard_id, e)
            return
        known = {i.pid: i for i in self._known if procs.find(i) is not None}
        for i in now:
            known[i.pid] = i
        merged = sorted(known.values(), key=lambda i: i.pid)
        if merged != self._known:
            self._known = merged
            self.record.descendants = [(i.pid, i.start) for i in merged]
            if not self.ended.is_set() and not self.stopping:
                try:
                    records.write(self._data_dir, self.record)
                except OSError as e:
                    log.warning("shard %s: could not update its record: %s", self.shard_id, e)

    def _failure(self, code: int | None) -> str:
        words = _ended_words(code, self.adopted)
        last = [line.text for line in self.ring.lines(LAST_LINES)]
        tail = "\n".join(last)[-_LAST_BYTES:]
        return f"{words}; its last lines:\n{tail}" if tail else f"{words}, writing nothing"


async def terminate_engine(leader: procs.Ident, pgid: int, known: list[procs.Ident], mark: str,
                           grace_s: float) -> None:
    """SIGTERM to every process of the engine; SIGKILL after grace_s to what is left, found again."""
    found = await asyncio.to_thread(procs.engine_processes, leader, pgid, known, mark)
    if not found and not procs.group_is_ours(leader, pgid):
        return
    await asyncio.to_thread(procs.signal_all, leader, pgid, found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not all(procs.gone(p) for p in found):
        await asyncio.sleep(0.1)
    # Looked for again: what forked or left the group meanwhile is killed too.
    left = await asyncio.to_thread(procs.engine_processes, leader, pgid, known, mark)
    left += [p for p in found if not procs.gone(p) and p.pid not in {q.pid for q in left}]
    if left:
        log.warning("killing processes that outlived SIGTERM by %.0f s: %s", grace_s,
                    ", ".join(str(p.pid) for p in left))
        await asyncio.to_thread(procs.signal_all, leader, pgid, left, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(procs.gone(p) for p in left):
            await asyncio.sleep(0.05)


def _ended_words(code: int | None, adopted: bool) -> str:
    if code is None:
        return ("the engine ended; its exit code is not known to an agent that adopted it rather than started it"
                if adopted else "the engine ended")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the engine was ended by {name} (exit code {code})"
    return f"the engine exited with code {code}"


def read_key(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
