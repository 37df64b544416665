"""The supervisor: starts engines, adopts the ones a previous agent left running, stops them, reports."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import secrets
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from llmgw.agent.supervisor import output, procs, readiness, records, users
from llmgw.agent.supervisor.records import RecordError, ShardRecord
from llmgw.agent.supervisor.ring import DEFAULT_LIMITS, OutputLimits
from llmgw.agent.supervisor.shard import LEFTOVER_GRACE_S, Shard, read_key, terminate_engine
from llmgw.protocol import LogLine, ShardLoad, ShardStatus

log = logging.getLogger("llmgw.agent.supervisor")

# What an engine takes from the agent's own environment; the rest (a join
# token, a proxy's password, the agent's own settings) is none of its business.
# The engine's adapter adds what it needs in EngineSpec.env.
_PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "TMPDIR",
               "CUDA_HOME", "CUDA_PATH", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY",
               "HTTPS_PROXY", "NO_PROXY",
               # Where llmgw.pyz is unpacked: an engine that is the archive again (sim) finds it there.
               "LLMGW_PYZ_CACHE")

OnStatus = Callable[[ShardStatus], "Awaitable[None] | None"]


@dataclass
class EngineSpec:
    """One engine to run: what the engine adapter built, and what to say about it."""

    shard_id: str
    command: list[str]
    model: str
    """The name the engine serves; readiness waits for /v1/models to list it."""
    url: str
    """The engine's root (http://127.0.0.1:8001), where /health and /v1/models answer."""
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    """Added to the few variables passed from the agent's environment (PATH, locale, CUDA_HOME, proxies)."""
    cwd: str | None = None
    """None: a directory of the shard's own under the data dir, owned by the engine's user."""
    api_key_file: str = ""
    """The engine's API key, for the readiness check; only the path is written down."""
    kv_events: str = ""
    """Where its KV-cache events are published, for the agent to follow (agent/kvfeed.py)."""
    health_path: str = "/health"
    """Where it says it is up (readiness.py): /health for the OpenAI engines, which must list the model too; another
    path (ComfyUI's /system_stats) is the whole check, for an engine that lists no model."""


class Supervisor:
    """Runs engines as process groups of their own and keeps what is needed to adopt them after a restart.

    Every change of a shard's state is passed to `on_status` (a function or
    coroutine) when given, and otherwise put on `self.changes` for the agent
    to read.
    """

    def __init__(self, data_dir: str | Path, *, user: str | None = users.DEFAULT_USER,
                 create_user: bool = True, limits: OutputLimits = DEFAULT_LIMITS,
                 on_status: OnStatus | None = None):
        self.data_dir = Path(data_dir)
        self.limits = limits
        self.changes: asyncio.Queue[ShardStatus] = asyncio.Queue()
        self._user = user
        self._create_user = create_user
        self._run_as: users.RunAs | None = None
        self._on_status = on_status
        self._shards: dict[str, Shard] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._http: aiohttp.ClientSession | None = None

    # --- the interface the agent calls ----------------------------------------------------

    async def start(self, spec: EngineSpec) -> Shard:
        """Start an engine, or return the one already running under this shard id (StartShard is retried).

        A start that fails — the shard id, the user, the program — is a
        shard in state failed saying why, reported like any other.
        """
        async with self._lock(spec.shard_id):
            running = self._shards.get(spec.shard_id)
            if running is not None and not running.ended.is_set():
                return running
            shard = await self._spawn(spec)
            self._shards[spec.shard_id] = shard
            return shard

    async def adopt(self) -> list[Shard]:
        """Take over the engines a previous agent on this node left running; forget the ones that ended.

        Each record is checked: same boot, the process alive and the same
        one (its start time counted from boot, and its command line). One
        that ended leaves what it started killed and its record removed; a
        PID now somebody else's is left alone. Adopted engines are checked
        for readiness once before this returns, so the agent can say what it
        runs when it registers.
        """
        found, bad = await asyncio.to_thread(records.read_all, self.data_dir)
        for path, why in bad:
            log.warning("%s; removed", why)
            path.unlink(missing_ok=True)
        boot = procs.boot_id()
        adopted: list[Shard] = []
        for rec in found:
            async with self._lock(rec.shard_id):
                if rec.shard_id in self._shards and not self._shards[rec.shard_id].ended.is_set():
                    continue
                shard = await self._adopt_one(rec, boot)
                if shard is not None:
                    self._shards[rec.shard_id] = shard
                    adopted.append(shard)
        return adopted

    async def stop(self, shard_id: str, grace_s: float = 30.0, reason: str = "") -> ShardStatus:
        """SIGTERM to the engine's group and to what left it; SIGKILL after grace_s; its final status.

        Stopping a shard that is not running answers its last status (or
        stopped when unknown): the control plane repeats a StopShard it got
        no answer to.
        """
        async with self._lock(shard_id):
            shard = self._shards.get(shard_id)
            if shard is None:
                return ShardStatus(shard_id=shard_id, state="stopped", since=time.time(),
                                   message="no engine runs under this shard id")
            if not shard.ended.is_set():
                log.info("stopping shard %s (pid %d)%s", shard_id, shard.pid, f": {reason}" if reason else "")
                await shard.terminate(grace_s)
            return shard.status()

    async def drain(self, shard_id: str) -> ShardStatus | None:
        """Say the shard takes no new requests (the control plane stops routing to it); it keeps running."""
        shard = self._shards.get(shard_id)
        if shard is None:
            return None
        if shard.state in ("starting", "ready"):
            await shard.set_state("draining")
        return shard.status()

    def get(self, shard_id: str) -> Shard | None:
        return self._shards.get(shard_id)

    def statuses(self) -> list[ShardStatus]:
        return [s.status() for s in self._shards.values()]

    def logs(self, shard_id: str, lines: int = 200) -> list[LogLine]:
        """The shard's last lines of output, for `llmgw ctl logs NODE --source SHARD`; [] when unknown."""
        shard = self._shards.get(shard_id)
        return shard.logs(lines) if shard is not None else []

    def loads(self) -> list[ShardLoad]:
        """CPU and memory per running shard, for the heartbeat (blocking: psutil reads /proc)."""
        return [s.load() for s in self._shards.values() if not s.ended.is_set()]

    async def stop_all(self, grace_s: float = 30.0) -> None:
        await asyncio.gather(*(self.stop(i, grace_s, "the agent is stopping its engines")
                               for i, s in list(self._shards.items()) if not s.ended.is_set()))

    async def close(self) -> None:
        """Stop watching, leave the engines running: the next agent on this node adopts them."""
        for shard in self._shards.values():
            shard.detach()
        if self._http is not None:
            await self._http.close()
            self._http = None

    # --- inside ---------------------------------------------------------------------------

    def _lock(self, shard_id: str) -> asyncio.Lock:
        return self._locks.setdefault(shard_id, asyncio.Lock())

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        return self._http

    async def _emit(self, status: ShardStatus) -> None:
        if self._on_status is None:
            self.changes.put_nowait(status)
            return
        result = self._on_status(status)
        if inspect.isawaitable(result):
            await result

    def _failed(self, spec: EngineSpec, why: str) -> Shard:
        rec = ShardRecord(shard_id=spec.shard_id, pid=0, pgid=0, create_time=0.0, command=list(spec.command),
                          port=spec.port, url=spec.url, model=spec.model, started_at=time.time())
        shard = Shard(rec, self.data_dir, self.limits, proc=None, adopted=False, emit=self._emit,
                      session=self._session)
        shard.state, shard.message = "failed", why
        shard.ended.set()
        asyncio.get_running_loop().create_task(self._emit(shard.status()))
        log.warning("shard %s could not start: %s", spec.shard_id, why)
        return shard

    async def _spawn(self, spec: EngineSpec) -> Shard:
        try:
            directory = records.shard_dir(self.data_dir, spec.shard_id)
        except RecordError as e:
            return self._failed(spec, str(e))
        if not spec.command:
            return self._failed(spec, "the engine's command is empty")
        try:
            if self._run_as is None:
                self._run_as = await asyncio.to_thread(users.resolve, self._user, create=self._create_user)
            run_as = self._run_as
        except users.UserError as e:
            return self._failed(spec, str(e))
        directory.mkdir(parents=True, exist_ok=True)
        cwd = spec.cwd
        if cwd is None:
            work = directory / "work"
            work.mkdir(exist_ok=True)
            if run_as.uid is not None and run_as.gid is not None:  # run_as.switches: resolve sets both or neither
                os.chown(work, run_as.uid, run_as.gid)
            cwd = str(work)
        env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
        env.update(HOME=run_as.home if run_as.switches and os.path.isdir(run_as.home) else cwd,
                   USER=run_as.name, LOGNAME=run_as.name)
        env.update(spec.env)
        mark = f"{spec.shard_id}/{secrets.token_hex(8)}"
        env[procs.MARK] = mark
        fd = output.open_for_engine(directory / records.OUTPUT)
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.command, stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd, cwd=cwd, env=env,
                # A group and session of its own: a signal to the agent's group
                # (Ctrl-C, systemd's stop of the agent) does not reach the
                # engine, and a stop can signal everything the engine forked.
                start_new_session=True, **run_as.popen_args())
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            return self._failed(spec, f"could not run {spec.command[0]}: {e}")
        finally:
            os.close(fd)
        try:
            p = psutil.Process(proc.pid)
            leader = procs.ident(p)
            create_time = p.create_time()
        except psutil.Error:
            # Ended already (and reaped): the watcher reports its exit code.
            leader, create_time = procs.Ident(proc.pid, 0.0), time.time()
        rec = ShardRecord(shard_id=spec.shard_id, pid=proc.pid, pgid=proc.pid, create_time=create_time,
                          command=list(spec.command), boot_start=leader.start, boot_id=procs.boot_id(),
                          port=spec.port, url=spec.url, model=spec.model, started_at=time.time(),
                          user=run_as.name, api_key_file=spec.api_key_file, mark=mark, kv_events=spec.kv_events,
                          health_path=spec.health_path)
        try:
            await asyncio.to_thread(records.write, self.data_dir, rec)
        except OSError as e:
            # Unrecorded, the engine would outlive this agent unknown to the next: not started at all.
            await terminate_engine(leader, proc.pid, [], mark, 1.0)
            return self._failed(spec, f"could not write the shard's record under {self.data_dir} ({e})")
        shard = Shard(rec, self.data_dir, self.limits, proc=proc, adopted=False, emit=self._emit,
                      session=self._session)
        log.info("started shard %s as pid %d (user %s): %s", spec.shard_id, proc.pid, run_as.name,
                 " ".join(spec.command))
        await self._emit(shard.status())
        shard.begin()
        return shard

    async def _adopt_one(self, rec: ShardRecord, boot: str) -> Shard | None:
        if rec.boot_id and boot and rec.boot_id != boot:
            log.info("shard %s: its engine ran before the machine restarted; record removed", rec.shard_id)
            records.remove(self.data_dir, rec.shard_id)
            return None
        leader = procs.Ident(rec.pid, rec.boot_start)
        p = procs.find(leader)
        if p is None:
            # Ended while no agent watched. What it started may not have:
            # a worker in a session of its own still holds the card.
            log.info("shard %s: pid %d ended while no agent watched; record removed", rec.shard_id, rec.pid)
            await terminate_engine(leader, rec.pgid, [procs.Ident(q, t) for q, t in rec.descendants], rec.mark,
                                   LEFTOVER_GRACE_S)
            records.remove(self.data_dir, rec.shard_id)
            return None
        try:
            cmdline = p.cmdline()
        except psutil.Error:
            cmdline = []
        if cmdline != rec.command:
            log.warning("shard %s: pid %d runs %r now, not the engine recorded; left alone, record removed",
                        rec.shard_id, rec.pid, " ".join(cmdline))
            records.remove(self.data_dir, rec.shard_id)
            return None
        shard = Shard(rec, self.data_dir, self.limits, proc=None, adopted=True, emit=self._emit,
                      session=self._session)
        shard.output().seed()
        waiting = await readiness.check(self._session(), rec.url, rec.model, read_key(rec.api_key_file),
                                        health_path=rec.health_path)
        if not waiting:
            shard.state = "ready"
        shard.message = waiting
        log.info("adopted shard %s: pid %d, %s", rec.shard_id, rec.pid, shard.state)
        await self._emit(shard.status())
        shard.begin(ready_now=not waiting)
        return shard
