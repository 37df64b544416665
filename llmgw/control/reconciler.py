"""The leader's loop: what the catalog wants, what the agents run, and the actions between them.

Only the leader reconciles. Each pass (when an agent says something, and at
least every PASS_EVERY seconds) reads the catalog from the store, the nodes
from the AgentService, the replicas from its own memory (loaded from the
store when it took the lead) and what the router's requests ask for (its
DemandRecord: on-demand models waited for, when each model was last used),
runs the pure placement (llmgw.control.catalog.place) and carries the plan
out: StartShard and StopShard to the agents, replica rows written, ready
replicas handed to the router's registry with why placement waits and where
replicas are loading, which requests waiting for a load are told.

What the agents say moves the replicas' states in memory at once; rows are
written at the end of a pass, in one transaction, so a thousand heartbeats
are not a thousand writes. A replica whose start has made no progress for
its startup timeout — counted from the download's last progress, not from
the start, so a large download is not a failed start — is stopped and
marked failed, and placement replaces it after its retry delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

from prometheus_client import Histogram

from llmgw.control.agentsvc import AgentService, Node
from llmgw.control.catalog import Demand, Entry, NodeView, Plan, Policy, place
from llmgw.control.catalog.fit import gb
from llmgw.control.catalog.placement import GONE
from llmgw.control.catalog.plan import Forget, Lost, Purge, Start, Stop, Wait
from llmgw.control.catalog.sizing import sized
from llmgw.control.routes import RouteSink, placed_models
from llmgw.events import Events
from llmgw.protocol import (
    EngineProfile,
    Heartbeat,
    Register,
    RemoveWeights,
    ShardStatus,
    StartShard,
    StopShard,
    to_dict,
)
from llmgw.store import CatalogStore, NodeRecord, Replica, StoreError
from llmgw.telemetry import Span, Tracing, end, traceparent_of

log = logging.getLogger("llmgw.reconciler")

PASS_EVERY = 2.0
STARTUP_TIMEOUT = 600.0  # seconds without progress before a start is given up
RESEND_AFTER = 10.0  # a StartShard not acknowledged is sent again after this
FORGET_AFTER = 600.0  # a stopped or failed replica's row is kept this long, for `ctl replicas`
# A steady pass over a few nodes takes milliseconds; over 1,000 nodes and 5,000
# replicas about a quarter of a second (benchmarks/bench_cluster.py).
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A replica's start is over, for its `replica start` span, once it is in one of these.
START_ENDS = ("ready", "failed", "stopped", "parked")


def parked_message(model: str, why: str) -> str:
    """What `ctl replicas` and `ctl models` say of a parked replica: why, and the two ways on.

    It starts "parked: " as `build.py run` expects of a replica's message (it shows "STATE on node N: …" with
    the state said once), so a first run says how to retry or remove the model too.
    """
    return (f"parked: its weights could not be had: {why.rstrip('.')}. "
            f"`llmgw ctl restart --model {model}` tries again; `llmgw ctl model remove {model}` removes it")


class _NoLongerLeading(Exception):
    """Leadership ended in the middle of a pass: the rest of it is not carried out."""


class Reconciler:
    def __init__(self, store: CatalogStore, agents: AgentService, *, leading: Callable[[], bool],
                 registry: Callable[[], RouteSink | None], policy: Callable[[], Policy] = Policy,
                 startup_timeout: Callable[[], float] = lambda: STARTUP_TIMEOUT,
                 engine_key: Callable[[], str] = lambda: "",
                 demand: Callable[[], Demand] = Demand,
                 clock: Callable[[], float] = time.time, tracing: Tracing | None = None,
                 events: Events | None = None,
                 mirrors: Callable[[EngineProfile], list[str]] = lambda profile: [],
                 tokenizers: Path | None = None) -> None:
        self._tokenizers = tokenizers  # where each Hugging Face model's tokenizer is kept (control/tokenizers.py)
        # Told of a replica failed and a node lost (llmgw/events.py); only the leader reconciles.
        self._mirrors = mirrors
        self._events = events
        self._told_lost: set[str] = set()  # nodes whose loss was told, until they connect again
        self._engine_key = engine_key
        self._demand = demand  # what the router's requests ask for: on-demand loads, when each model was used
        self.store = store
        self.agents = agents
        self._leading = leading
        self._registry = registry
        self._policy = policy  # read at each pass: the cluster's settings are live
        self._startup_timeout = startup_timeout
        self.policy = policy()
        self.startup_timeout = startup_timeout()
        self._clock = clock
        self.replicas: dict[str, Replica] = {}
        self.waits: dict[str, str] = {}  # model -> why a replica it wants cannot be placed
        self._progress: dict[str, float] = {}  # replica -> when its start last moved
        self._sent: dict[str, float] = {}  # replica -> when StartShard was last sent
        self._messages: dict[str, StartShard] = {}  # replica -> its StartShard, while it is pending
        # The control plane's traces: a `replica start` span from placement's decision until the replica is
        # ready or has failed, which the node's own spans of the start go beneath (StartShard.traceparent).
        self._tracing = tracing
        self._starts: dict[str, Span] = {}
        self._dirty: set[str] = set()
        self._nodes_dirty: set[str] = set()  # written whole: a Register, a link gone
        self._beats_dirty: set[str] = set()  # only a newer Heartbeat: written in one batch
        self._loaded = False
        self._led_since = 0.0
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        # Registered by whoever serves /metrics (the Cluster, in the control plane's registry).
        self.pass_seconds = Histogram("llmgw_reconcile_pass_seconds",
                                      "A reconcile pass on the leader: read the catalog, place, act, write",
                                      buckets=PASS_BUCKETS, registry=None)
        agents.on_message(self._heard)

    # --- what agents say ---------------------------------------------------------------------

    def _heard(self, node: Node, message: object) -> None:
        now = self._clock()
        if isinstance(message, ShardStatus):
            self._status(node, message, now)
        elif isinstance(message, Register):
            self._nodes_dirty.add(node.id)
            for status in message.shards:
                self._status(node, status, now)
            # What the node no longer runs, though we think it should: it restarted without it.
            running = {s.shard_id for s in message.shards}
            for r in self.replicas.values():
                if r.node_id == node.id and r.state in ("starting", "ready", "draining") and r.id not in running:
                    # Gone with its agent (stopped on purpose, or with the machine): a replacement is
                    # placed at once, not after a failure's retry delay — nothing here says it will crash.
                    self._set(r, state="stopped", desired="stop", message="the node came back without it",
                              since=now)
        elif isinstance(message, Heartbeat):
            self._beats_dirty.add(node.id)
        elif message is None:
            self._nodes_dirty.add(node.id)

    def _status(self, node: Node, status: ShardStatus, now: float) -> None:
        r = self.replicas.get(status.shard_id)
        if r is None:
            if self._loaded and status.state in ("starting", "ready", "draining"):
                # Running there, unknown here (a model removed while the node was away): stop it.
                log.info("node %s runs %s, which nothing here wants; stopping it", node.name, status.shard_id)
                self.agents.spawn(self.agents.send(node.id, StopShard(status.shard_id, self.policy.stop_grace,
                                                                          "no model wants it")))
            return
        if r.node_id != node.id:
            return  # a stale report of a shard placed elsewhere since
        if r.desired == "stop" and status.state in ("starting", "ready"):
            # Given up on here (its node was lost, its start timed out) but running there: stop it, so
            # nothing it held stays taken.
            self.agents.spawn(self.agents.send(node.id, StopShard(r.id, self.policy.stop_grace,
                                                                      r.message or "replaced elsewhere")))
            return
        self._progress[r.id] = now
        detail = dict(r.detail)
        if status.fetch is not None:
            detail["fetch"] = to_dict(status.fetch)
        elif "fetch" in detail and status.state != "starting":
            detail.pop("fetch")
        if status.weights_bytes:
            detail["weights_bytes"] = status.weights_bytes
        # A replica stopped on purpose keeps the reason it was stopped ("evicted after 3s idle, for
        # mesh"): the engine's own last word then is only "exited with code 0".
        message = r.message if r.desired == "stop" and status.state == "stopped" and r.message else status.message
        state: str = status.state  # a replica has states a shard does not: "parked"
        if state == "failed" and status.cause == "weights" and r.desired == "run":
            # The download already tried again with its backoff; another start fails the same way. Parked,
            # it holds nothing and placement leaves it until someone retries or removes the model (issue 11:
            # an unreachable hf: was retried without end, and every later `run` met it again).
            state, message = "parked", parked_message(r.model, message)
            log.warning("replica %s of %s on node %s parked: %s", r.id, r.model, node.name, status.message)
        self._set(r, state=state, url=status.url or r.url, message=message,
                  since=status.since or now, detail=detail)

    def _set(self, r: Replica, **changes: Any) -> None:
        new = dc_replace(r, **changes)
        if new != r:
            self.replicas[r.id] = new
            self._dirty.add(r.id)
            if new.state == "failed" and r.state != "failed" and self._events is not None:
                self._events.emit("replica_failed", subject=r.id, replica=r.id, model=r.model, node_id=r.node_id,
                                  reason=new.message or "")
            if new.state in START_ENDS and r.id in self._starts:
                self._start_over(r.id, new.state)

    def _start_over(self, replica_id: str, outcome: str) -> None:
        span = self._starts.pop(replica_id)
        span.set_attribute("llmgw.outcome", outcome)
        end(span, None if outcome == "ready" else outcome)

    def _starts_over(self, outcome: str) -> None:
        """Every start still traced ends here: the leader stops, or leads no more."""
        for replica_id in list(self._starts):
            self._start_over(replica_id, outcome)

    # --- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="reconciler")

    async def stop(self) -> None:
        if self._task is not None:
            # Told as well as cancelled: Python 3.11's wait_for swallows a
            # cancel that lands as the event it waits on is set, and agents'
            # links dropping as the server stops set it. The loop carried on
            # and the server never stopped (a Ctrl-C of `build.py run`).
            self._stopping = True
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._starts_over("leader_stopped")
        try:
            await self._write()
        except StoreError:
            pass

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self.agents.changed.wait(), PASS_EVERY)
            except TimeoutError:
                pass
            self.agents.changed.clear()
            if not self._leading():
                self._loaded = False
                self._starts_over("leadership_ended")
                continue
            try:
                await self.once()
            except _NoLongerLeading:
                self._loaded = False  # a later lead reads the replicas again, as another leader left them
                log.info("leadership ended during a reconcile pass; the rest of it was not carried out")
            except StoreError as e:
                log.warning("a reconcile pass could not reach the store: %s", e)
            except Exception:  # a bug in one pass must not end placement for good
                log.exception("a reconcile pass failed")

    async def once(self) -> Plan:
        """One pass: read, place, act, write. Returns the plan it carried out."""
        started = time.perf_counter()
        now = self._clock()
        self.policy, self.startup_timeout = self._policy(), self._startup_timeout()
        if not self._loaded:
            self.replicas = {r.id: r for r in await self.store.list_replicas()}
            self._loaded = True
            self._led_since = now
        records = await self.store.list_models(include_removed=True)
        self._still_leading()
        entries = []
        for record in records:
            try:
                entries.append(Entry.from_record(record))
            except Exception as e:  # noqa: BLE001 - one bad row must not stop the others
                log.error("the catalog's model %s cannot be read: %s", record.name, e)
        self._size_from_weights(entries)
        nodes = await self._nodes(now)
        self._still_leading()
        self._time_out_starts(now)
        plan = place(entries, nodes, list(self.replicas.values()), now, demand=self._demand(), policy=self.policy)
        await self._carry_out(plan, now)
        await self._resend(now)
        self._forget_old(now)
        self._still_leading()
        await self._write()
        self._fill_registry(entries)
        self.passes += 1
        self.pass_seconds.observe(time.perf_counter() - started)
        return plan

    def _still_leading(self) -> None:
        """Raise _NoLongerLeading when the lease is no longer ours.

        `leading()` is checked at the top of each pass, but a pass waits on
        the store: a store that stops answering holds a statement for up to
        its timeout (30 s), longer than the lease's TTL, and the lease reads
        its own clock, so by then another control plane may lead. Checked
        again after each wait on the store and before each action, a
        pass never acts for a leader that has stepped down.
        """
        if not self._leading():
            raise _NoLongerLeading()

    async def _nodes(self, now: float) -> list[NodeView]:
        views: dict[str, NodeView] = {}
        records = await self.store.list_nodes()
        self._still_leading()
        for record in records:
            if record.id in self.agents.nodes:
                # Its view is made from what the agent said, below. Decoding the stored Register
                # and Heartbeat was most of a steady pass over 1,000 nodes (bench_cluster).
                continue
            try:
                view = NodeView.from_record(record)
            except Exception as e:  # noqa: BLE001
                log.error("the node record %s cannot be read: %s", record.id, e)
                continue
            # A leader that has just taken over has heard from nobody yet: its nodes are counted
            # from when it took the lead, so they have node_lost_after to find it before their
            # replicas are placed again — a failover must not restart every model.
            if view.seen_at is not None:
                view.seen_at = max(view.seen_at, self._led_since)
            views[record.id] = view
        monotonic = time.monotonic()
        beats: list[tuple[str, dict[str, Any], float]] = []
        self._tell_lost(monotonic)
        for node in self.agents.nodes.values():
            # Seen: wall time now minus how long ago the agent last spoke (its link's clock).
            seen = now - (monotonic - node.last_seen) if node.last_seen else None
            view = NodeView.of(node.register, node.heartbeat, seen, state="connected" if node.connected else "lost")
            views[node.id] = view
            if node.id in self._nodes_dirty:
                self._nodes_dirty.discard(node.id)
                self._beats_dirty.discard(node.id)
                await self.store.put_node(NodeRecord(
                    id=node.id, name=node.name, register=to_dict(node.register),
                    labels=dict(node.register.labels),
                    heartbeat=to_dict(node.heartbeat) if node.heartbeat else None, heartbeat_at=seen,
                    state=view.state, first_seen=views[node.id].seen_at or now, updated_at=now))
            elif node.id in self._beats_dirty:
                self._beats_dirty.discard(node.id)
                if node.heartbeat is not None and seen is not None:
                    beats.append((node.id, to_dict(node.heartbeat), seen))
        if beats:
            # A thousand nodes beat every 5 s: one statement for all of them, not a write each with
            # its Register encoded again (bench_cluster).
            await self.store.put_node_heartbeats(beats)
        return list(views.values())

    def _tell_lost(self, monotonic: float) -> None:
        """A node whose agent has been away for node_lost_after is told lost, once until it connects again:
        from then its replicas are placed elsewhere (a link that drops and comes back at once is not news)."""
        for node in self.agents.nodes.values():
            if node.connected or node.lost_at is None:
                self._told_lost.discard(node.id)
                continue
            away = monotonic - node.lost_at
            if away >= self.policy.lost_after and node.id not in self._told_lost:
                self._told_lost.add(node.id)
                if self._events is not None:
                    self._events.emit("node_lost", subject=node.id, node_id=node.id, node=node.name,
                                      away_s=round(away, 1), replicas=sorted(
                                          r.id for r in self.replicas.values()
                                          if r.node_id == node.id and r.state not in GONE))

    def _size_from_weights(self, entries: list[Entry]) -> None:
        """A model added without knowing its size: each replica keeps what its weights' length needs, once known.

        The length is on the replica's row (detail.weights_bytes, as its node
        reported it), so a leader that takes over knows it too; the model's
        later replicas are placed with it (Entry.weights_bytes).
        """
        by_name = {e.name: e for e in entries}
        for r in list(self.replicas.values()):
            length = int(r.detail.get("weights_bytes") or 0)
            entry = by_name.get(r.model)
            if not length or entry is None or r.profile >= len(entry.spec.profiles):
                continue
            entry.weights_bytes = max(entry.weights_bytes, length)
            if r.state in GONE:
                continue
            size = sized(entry.spec.profiles[r.profile], length)
            if size and (r.cpu_cores, r.memory_mb) != size:
                log.info("replica %s of %s keeps %d cores and %d MB, sized from its %d-byte weights",
                         r.id, r.model, size[0], size[1], length)
                self._set(r, cpu_cores=size[0], memory_mb=size[1])

    def _time_out_starts(self, now: float) -> None:
        for r in list(self.replicas.values()):
            if r.state not in ("pending", "starting") or r.desired != "run":
                continue
            moved = self._progress.get(r.id, r.since or r.created_at)
            if now - moved > self.startup_timeout:
                why = (f"no progress for {self.startup_timeout:.0f} s while starting "
                       f"({r.message or 'no word from the node'})")
                log.warning("replica %s of %s on node %s: %s", r.id, r.model, r.node_id, why)
                self._set(r, state="failed", desired="stop", message=why, since=now)
                self.agents.spawn(self.agents.send(r.node_id, StopShard(r.id, self.policy.stop_grace, why)))

    async def _carry_out(self, plan: Plan, now: float) -> None:
        waits: dict[str, str] = {}
        for action in plan.ordered():
            self._still_leading()
            if isinstance(action, Lost):
                r = self.replicas.get(action.shard_id)
                if r is not None:
                    # desired "stop": should its node come back with it still running, it is stopped there.
                    self._set(r, state="failed", desired="stop", message=action.reason, since=now)
            elif isinstance(action, Stop):
                r = self.replicas.get(action.shard_id)
                if r is not None:
                    self._set(r, desired="stop", state="draining" if r.state == "ready" else r.state,
                              message=action.reason)
                await self.agents.send(action.node_id, StopShard(action.shard_id, action.grace_s, action.reason))
            elif isinstance(action, Start):
                r = action.replica(now)
                self.replicas[r.id] = r
                self._dirty.add(r.id)
                self._progress[r.id] = now
                log.info("starting %s of %s on node %s%s", r.id, r.model, action.node_id,
                         f" ({action.reason})" if action.reason else "")
                message = self._messages[r.id] = dc_replace(action.message(self.startup_timeout),
                                                            api_key=self._engine_key(),
                                                            traceparent=self._trace_start(r, action),
                                                            mirrors=self._mirrors(action.profile))
                if await self.agents.send(action.node_id, message):
                    self._sent[r.id] = now
            elif isinstance(action, Purge):
                await self.agents.send(action.node_id, RemoveWeights(list(action.sources)))
            elif isinstance(action, Forget):
                await self.store.delete_model(action.model)
            elif isinstance(action, Wait):
                waits[action.model] = action.reason
        self.waits = waits

    def _trace_start(self, r: Replica, action: Start) -> str:
        """A `replica start` span for `r`, and the traceparent the node's spans of it go beneath ("" off)."""
        span = self._tracing.start("replica start") if self._tracing is not None else None
        if span is None:
            return ""
        self._starts[r.id] = span
        node = self.agents.nodes.get(action.node_id)
        if span.is_recording():
            span.set_attribute("llmgw.model", r.model)
            span.set_attribute("llmgw.replica", r.id)
            span.set_attribute("llmgw.node", node.name if node is not None else action.node_id)
            span.set_attribute("llmgw.profile", r.profile)
            if action.reason:
                span.set_attribute("llmgw.reason", action.reason)  # placement's own words: "on demand", …
        return traceparent_of(span).get("traceparent", "")

    async def _resend(self, now: float) -> None:
        """A StartShard the agent never answered (sent while it was away) goes again: it is idempotent.

        A pending row this leader did not place (it took the lead since) has
        no message to send again; its node's Register said whether it runs,
        so one still pending was never started and is given up, to be placed
        again after the retry delay.
        """
        for r in list(self.replicas.values()):
            if r.state != "pending" or r.desired != "run" or now - self._sent.get(r.id, 0.0) <= RESEND_AFTER:
                continue
            self._still_leading()
            message = self._messages.get(r.id)
            if message is None:
                self._set(r, state="failed", desired="stop", since=now,
                          message="its start was not confirmed before the leader changed")
            elif await self.agents.send(r.node_id, message):
                self._sent[r.id] = now

    def _forget_old(self, now: float) -> None:
        gone = [r.id for r in self.replicas.values()
                if r.state in GONE and r.desired == "stop" and now - (r.since or now) > FORGET_AFTER]
        for rid in gone:
            self.replicas.pop(rid, None)
            self._dirty.add(rid)
        for rid in [k for k, r in self.replicas.items() if r.state != "pending" or r.desired != "run"]:
            self._messages.pop(rid, None)

    async def _write(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        keep = [self.replicas[i] for i in dirty if i in self.replicas]
        drop = [i for i in dirty if i not in self.replicas]
        try:
            if keep:
                await self.store.put_replicas(keep)
            if drop:
                await self.store.delete_replicas(drop)
        except StoreError:
            self._dirty |= dirty  # written with the next pass
            raise

    def _fill_registry(self, entries: list[Entry]) -> None:
        registry = self._registry()
        if registry is None:
            return
        registry.set_placed(placed_models(entries, self.replicas.values(), self._engine_key() or None,
                                          self._tokenizers))
        registry.set_notes(dict(self.waits), self._loading())

    def _loading(self) -> dict[str, str]:
        """Where each model's replica is loading and how far along, as a request waiting for it is told."""
        said: dict[str, str] = {}
        for r in self.replicas.values():
            if r.desired != "run" or r.state not in ("pending", "starting") or r.model in said:
                continue
            node = self.agents.nodes.get(r.node_id)
            fetch = r.detail.get("fetch") or {}
            done, total = int(fetch.get("bytes_done") or 0), int(fetch.get("bytes_total") or 0)
            if fetch.get("phase") == "checking":
                how = "checking its weights"
            elif fetch and total:
                how = f"{done * 100 // total}% of its weights fetched"
            elif fetch:
                how = f"{gb(done / 2**20)} of its weights fetched"
            elif r.state == "pending":
                how = "asked to start"
            else:
                how = "its engine starting"
            said[r.model] = f"on {node.name if node else r.node_id}, {how}"
        return said
