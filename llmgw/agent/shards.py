"""What a StartShard sets going on a node: the weights fetched, the engine's command built, the process started.

The agent's `Shards` (llmgw.agent.link): idempotent by shard id — the
control plane retries a StartShard it has no answer to, and a shard that is
fetching, starting or running is not started twice. Every step reports a
ShardStatus on `updates`: "starting" with the download's progress, then
what the supervisor sees (ready, failed, stopped). A failure at any step is
a failed shard with a sentence, never an exception out of here: the agent's
link must keep serving the other shards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from llmgw.agent.kvfeed import KvFeed
from llmgw.agent.supervisor import EngineSpec, Supervisor, users
from llmgw.agent.weights import Weights, WeightsError
from llmgw.engines import EngineError
from llmgw.files import write_atomic
from llmgw.protocol import (
    FetchProgress,
    LogLine,
    LogsRequest,
    NodeLogs,
    RemoveWeights,
    ShardLoad,
    ShardStatus,
    StartShard,
    StopShard,
)
from llmgw.telemetry import Span, Tracing, end, parent_from

log = logging.getLogger("llmgw.agent.shards")

# What a shard's start ends in, for its spans: the supervisor's word once the engine answers or gives up.
LOADED = ("ready", "failed", "stopped")


def free_port(host: str = "127.0.0.1") -> int:
    """A port for an engine, from the kernel's ephemeral range.

    From that range on purpose, unlike llmgw.ports: `llmgw firewall on` closes
    the ephemeral range to machines outside the cluster (docs/firewall.md), and
    a port below it would be open to everyone. The cost is a small window in
    which an outgoing connection may take the port before the engine binds it.
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _v1(url: str) -> str:
    if not url:
        return url
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class ShardRunner:
    """The node's shards: fetching, then the supervisor's.

    `engine(name)` gives an adapter (llmgw.engines); `binary(name)`
    the program to run for it, awaited (llama.cpp's may be installed on
    first use); `host` is the address engines listen on and `advertise` the
    one the control plane's router reaches them at.
    """

    def __init__(self, *, supervisor: Supervisor, weights: Weights, engine: Callable[[str], Any],
                 binary: Callable[..., Any], engines: dict[str, str], host: str = "127.0.0.1",
                 advertise: str = "127.0.0.1", disabled: tuple[str, ...] = (),
                 own_log: Callable[[int], list[LogLine]] | None = None, key_dir: str = "",
                 engine_user: str | None = None, tracing: Tracing | None = None,
                 kv: KvFeed | None = None) -> None:
        self.supervisor = supervisor
        # Each ready replica's KV-cache events, followed for the leader's routing (agent/kvfeed.py).
        self.kv = kv or KvFeed()
        self.key_dir = key_dir or "."
        self.engine_user = engine_user
        self.weights = weights
        self._engine, self._binary = engine, binary
        self._engines = dict(engines)
        self.host, self.advertise = host, advertise
        self.disabled = set(disabled)
        self._own_log = own_log
        self.updates: asyncio.Queue = asyncio.Queue()
        self._pending: dict[str, ShardStatus] = {}  # fetching or being launched, before the supervisor has it
        self._tasks: dict[str, asyncio.Task] = {}
        self._sources: dict[str, str] = {}  # shard id -> weights source, for RemoveWeights' "in use"
        self._cards: dict[str, list[int]] = {}  # shard id -> the GPUs it was started on, for the node's overview
        # The node's traces of each start: `shard start` beneath the leader's `replica start` when the
        # StartShard carried one, with `download`, `launch` and `engine load` beneath it.
        self.tracing = tracing or Tracing("llmgw-agent")
        self._spans: dict[str, _StartSpans] = {}

    # --- the Shards seam ----------------------------------------------------------------------

    def engines(self) -> dict[str, str]:
        return {k: v for k, v in self._engines.items() if k not in self.disabled}

    def statuses(self) -> list[ShardStatus]:
        running = {s.shard_id: self._public(s) for s in self.supervisor.statuses()}
        return list({**self._pending, **running}.values())

    def cards(self) -> dict[str, list[int]]:
        """The GPUs of each shard started since this agent started (an adopted one's are not known)."""
        return {k: list(v) for k, v in self._cards.items()}

    def loads(self) -> list[ShardLoad]:
        return self.supervisor.loads()

    async def on_status(self, status: ShardStatus) -> None:
        """The supervisor's reports, passed on with the URL the router uses."""
        if status.shard_id in self._pending and status.state != "starting":
            self._pending.pop(status.shard_id, None)
        if status.state in LOADED and status.shard_id in self._spans:
            self._spans.pop(status.shard_id).over(status.state)
        if status.state == "ready":
            shard = self.supervisor.get(status.shard_id)
            if shard is not None and shard.record.kv_events:  # an adopted engine's, followed again
                self.kv.follow(status.shard_id, shard.record.kv_events)
        elif status.state in ("draining", "stopped", "failed"):
            self.kv.stop(status.shard_id)
        await self.updates.put(self._public(status))

    async def start(self, message: StartShard) -> None:
        shard_id = message.shard_id
        running = self.supervisor.get(shard_id)
        if running is not None and running.state not in ("stopped", "failed"):
            await self.updates.put(self._public(running.status()))  # a retry: say how it stands
            return
        if shard_id in self._tasks:
            await self.updates.put(self._pending[shard_id])
            return
        self._pending[shard_id] = ShardStatus(shard_id, "starting", message.profile.model, message="queued",
                                              since=time.time())
        self._sources[shard_id] = message.profile.source
        self._cards[shard_id] = list(message.profile.gpus)
        self._trace(message)
        task = asyncio.create_task(self._launch(message), name=f"shard-{shard_id}")
        self._tasks[shard_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(shard_id, None))

    async def stop(self, message: StopShard) -> None:
        task = self._tasks.pop(message.shard_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if message.shard_id in self._spans:
            self._spans.pop(message.shard_id).over("stopped")
        self._pending.pop(message.shard_id, None)
        self._sources.pop(message.shard_id, None)
        self._cards.pop(message.shard_id, None)
        status = await self.supervisor.stop(message.shard_id, message.grace_s, message.reason)
        await self.updates.put(self._public(status))

    async def remove_weights(self, message: RemoveWeights) -> None:
        in_use = set(self._sources.values())
        try:
            removed = await self.weights.remove(message.sources, in_use=in_use)
        except WeightsError as e:
            log.warning("removing weights: %s", e)
            return
        log.info("removed weights: %d file(s), %.1f MB freed", len(removed.removed), removed.freed_bytes / 1e6)

    async def logs(self, message: LogsRequest) -> NodeLogs:
        """A shard's last lines of output, or with no source the agent's own last lines."""
        lines = max(1, message.lines)
        if not message.source:
            if self._own_log is None:
                return NodeLogs(message.request_id, "", error="the agent's own log is in its journal "
                                                             "(journalctl -u llmgw-agent)")
            return NodeLogs(message.request_id, "", self._own_log(lines))
        if self.supervisor.get(message.source) is None:
            pending = self._pending.get(message.source)
            if pending is None:
                return NodeLogs(message.request_id, message.source, error=f"no shard {message.source} on this node")
            # Fetching its weights or being launched: no engine has written anything yet.
            return NodeLogs(message.request_id, message.source,
                            [LogLine(pending.since or time.time(), f"not started yet: {pending.message}", "agent")])
        return NodeLogs(message.request_id, message.source, self.supervisor.logs(message.source, lines))

    # --- one launch ------------------------------------------------------------------------------

    def _trace(self, message: StartShard) -> None:
        """The start's `shard start` span: beneath the leader's, kept or not as the leader decided; with no
        traceparent, a trace of the node's own, kept at the agent's sample_ratio."""
        parent = parent_from({"traceparent": message.traceparent}) if message.traceparent else None
        span = self.tracing.start("shard start", parent)
        if span is None:
            return
        profile = message.profile
        span.set_attribute("llmgw.model", profile.model)
        span.set_attribute("llmgw.shard", message.shard_id)
        span.set_attribute("llmgw.engine", profile.engine)
        self._spans[message.shard_id] = _StartSpans(self.tracing, span)

    async def _launch(self, message: StartShard) -> None:
        shard_id, profile = message.shard_id, message.profile
        spans = self._spans.get(shard_id)
        try:
            if profile.engine in self.disabled:
                raise _Refused(f"the engine {profile.engine} is disabled on this node (agent.yaml engines.disabled)")
            adapter = self._engine(profile.engine)
            adapter.validate(profile)
            model_path = ""
            if adapter.needs_weights and profile.source:
                await self._say(shard_id, profile.model, "fetching weights",
                                FetchProgress(profile.source))

                def progress(p: FetchProgress) -> None:
                    status = ShardStatus(shard_id, "starting", profile.model, message="fetching weights", fetch=p,
                                         since=self._pending[shard_id].since if shard_id in self._pending
                                         else time.time())
                    self._pending[shard_id] = status
                    self.updates.put_nowait(status)

                if spans is not None:
                    spans.step("download", {"llmgw.source.kind": _source_kind(profile.source)})
                model_path = await self.weights.fetch_profile(profile, on_progress=progress, mirrors=message.mirrors)
            length = await asyncio.to_thread(_length, model_path)
            if spans is not None:
                spans.step("launch", {"llmgw.engine": profile.engine, "llmgw.weights_bytes": length})
            await self._say(shard_id, profile.model, "starting the engine", weights_bytes=length)
            binary = await self._binary(profile.engine, bool(profile.gpus),
                                        lambda what: self._say_now(shard_id, profile.model, what))
            port = message.port or free_port(self.host if self.host not in ("", "0.0.0.0") else "127.0.0.1")  # noqa: S104 - read, not bound
            key_file = await asyncio.to_thread(self._key_file, shard_id, message.api_key) if message.api_key else None
            launch = adapter.command(profile, model_path=model_path, port=port, host=self.host, binary=binary,
                                     shard_id=shard_id, api_key_file=key_file)
            spec = EngineSpec(shard_id, launch.argv, launch.model or profile.model,
                              url=f"http://{_host(self.advertise)}:{port}", port=port, env=dict(launch.env),
                              api_key_file=key_file or "", kv_events=launch.kv_events,
                              health_path=launch.health_path)
            if spans is not None:
                # Until the engine answers its health check: the weights read, the model loaded.
                spans.step("engine load", {"llmgw.port": port})
            # Bound before the engine starts, so its publisher finds the port at once (agent/kvfeed.py).
            self.kv.follow(shard_id, launch.kv_events)
            await self.supervisor.start(spec)
        except asyncio.CancelledError:
            self.kv.stop(shard_id)
            raise
        except Exception as e:  # every failure is the shard's, said in its status
            self.kv.stop(shard_id)  # its port let go, if it got as far as being followed
            if shard_id in self._spans:
                # A code, never the sentence: a path, a URL or an engine's own words do not go in a span.
                self._spans.pop(shard_id).over("failed", "weights" if isinstance(e, WeightsError) else "launch")
            why = str(e) or type(e).__name__
            if not isinstance(e, (_Refused, WeightsError, EngineError)):  # those are sentences; the rest a bug
                log.exception("shard %s failed to start", shard_id)
            self._pending.pop(shard_id, None)
            await self.updates.put(ShardStatus(shard_id, "failed", profile.model, message=why, since=time.time(),
                                               cause="weights" if isinstance(e, WeightsError) else ""))

    def _key_file(self, shard_id: str, key: str) -> str:
        """The engine's API key in a file only it (and the agent) can read: never on a command line,
        where every user of the node could read it in `ps`."""
        directory = os.path.join(self.key_dir, "keys")
        os.makedirs(directory, mode=0o711, exist_ok=True)
        path = os.path.join(directory, f"{shard_id}.key")
        run_as = users.resolve(self.engine_user, create=True)
        owner = None if run_as.uid is None else (run_as.uid, run_as.gid if run_as.gid is not None else -1)
        write_atomic(path, (key + "\n").encode(), 0o600, owner)
        return path

    async def _say(self, shard_id: str, model: str, what: str, fetch: FetchProgress | None = None,
                   weights_bytes: int = 0) -> None:
        self._say_now(shard_id, model, what, fetch, weights_bytes)

    def _say_now(self, shard_id: str, model: str, what: str, fetch: FetchProgress | None = None,
                 weights_bytes: int = 0) -> None:
        """The shard's status while it starts (the queue is unbounded: put_nowait never refuses)."""
        since = self._pending[shard_id].since if shard_id in self._pending else time.time()
        status = ShardStatus(shard_id, "starting", model, message=what, fetch=fetch, since=since,
                             weights_bytes=weights_bytes)
        self._pending[shard_id] = status
        self.updates.put_nowait(status)

    @staticmethod
    def _public(status: ShardStatus) -> ShardStatus:
        if status.url and not status.url.rstrip("/").endswith("/v1"):
            status.url = _v1(status.url)
        return status


class _Refused(Exception):
    pass


class _StartSpans:
    """A start's `shard start` span and the step under way beneath it; each step ends as the next begins."""

    def __init__(self, tracing: Tracing, root: Span) -> None:
        self.tracing, self.root = tracing, root
        self.current: Span | None = None

    def step(self, name: str, attributes: dict[str, str | int]) -> None:
        end(self.current)
        self.current = self.tracing.start(name, self.root, attributes=attributes)

    def over(self, outcome: str, failed_in: str = "") -> None:
        error = None if outcome == "ready" else failed_in or outcome
        end(self.current, error)
        self.root.set_attribute("llmgw.outcome", outcome)
        end(self.root, error)


def _source_kind(source: str) -> str:
    """hf, mirror, http(s) or path: where weights came from, without the address (a URL can hold a token)."""
    scheme = source.split(":", 1)[0].lower() if ":" in source else ""
    return scheme if scheme in ("hf", "mirror", "http", "https", "s3") else "path"


def _length(path: str) -> int:
    """A single file's length in bytes; 0 for a directory (whose walk could be any size) or an id the engine fetches."""
    try:
        return os.path.getsize(path) if path and os.path.isfile(path) else 0
    except OSError:
        return 0


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
