"""Where each model's replicas run: one pure pass from the catalog and the cluster to a Plan.

    plan = place(models, nodes, replicas, now, demand=Demand(...))

No I/O and no clock of its own (`now` is given), so the reconciler can run
it as often as anything changes and a test can walk an idle timeout in one
line. It has to be quick: the bench runs it over 1,000 nodes and 5,000
replicas (benchmarks/bench_placement.py). A pass in steady state touches
each replica once; a replica to place is matched against nodes through a
heap per model, not by scanning every node each time.

What it decides, model by model (models that must run first, then on-demand
models someone asked for):

- replicas on a node lost (no heartbeat past `Policy.lost_after`) are Lost,
  and replaced elsewhere in the same plan;
- a replica that failed is replaced once `Policy.retry_after` has passed, so
  an engine that cannot start is not restarted in a tight loop;
- the count is brought to what the model's scaling wants: new replicas go
  where they fit, spread (the node with fewest replicas of the model first,
  then the most memory free); extras stop, changed ones and those not yet
  ready first;
- a replica started with something else than its model now says (a new
  profile, context, restart) is replaced one at a time, the new one beside
  it, and stopped once that one is ready. Without room beside it, the
  restart waits when other restarts are giving room back, stops it first
  when the model says `replace: in_place`, and otherwise says why;
- a model that does not fit may take the room of another model's on-demand
  replica idle past `evict_after_idle` and up for `min_lifetime`.
"""

from __future__ import annotations

import heapq
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace

from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.fit import Need, Room, Static, StaticKey
from llmgw.control.catalog.plan import Forget, Lost, Plan, Purge, Start, Stop, Wait
from llmgw.control.catalog.sizing import sized
from llmgw.control.catalog.spec import ModelSpec, load_spec
from llmgw.store import CatalogModel, Replica

GONE = ("stopped", "failed", "parked")
"""States of a replica that runs nothing and holds no room. A parked one (its weights could not be had)
keeps desired "run" and stays until its model changes, restarts or goes: placement starts no other for it."""
SHOWN_NODES = 3  # a Wait's reason names this many nodes; explain-placement names them all


@dataclass(frozen=True)
class Policy:
    lost_after: float = 30.0
    """A node silent this long is lost and its replicas are placed elsewhere (six heartbeats)."""
    retry_after: float = 30.0
    """A failed replica is replaced this long after it failed, not at once: a crash loop costs a start a half-minute."""
    stop_grace: float = 30.0
    """What StopShard gives an engine to finish its requests before it is killed."""


DEFAULT_POLICY = Policy()  # frozen, so one instance serves every default


@dataclass
class Entry:
    """A catalog model as a pass reads it."""

    spec: ModelSpec
    stopped: bool = False
    removed: bool = False
    purge: bool = False
    restarts: int = 0
    weights_bytes: int = 0
    """The length of its weights as a node reported it; sizes a profile that says size_from_weights."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def on_demand(self) -> bool:
        return self.spec.scaling.on_demand is not None

    @classmethod
    def from_record(cls, record: CatalogModel) -> Entry:
        spec = load_spec(record.spec, f"the catalog's model {record.name}")
        return cls(spec, stopped=record.stopped or spec.stopped, removed=record.removed_at is not None,
                   purge=record.purge, restarts=record.restarts)


@dataclass
class Demand:
    """What requests say, from the router: none of it is in the store."""

    asked: dict[str, float] = field(default_factory=dict)
    """On-demand models a request is waiting for, and since when."""
    last_used: dict[str, float] = field(default_factory=dict)
    """When each model last had a request."""
    wanted: dict[str, int] = field(default_factory=dict)
    """Replicas wanted for the load, kept between a model's min and max."""


def node_lost(node: NodeView, now: float, policy: Policy) -> str | None:
    """Why `node` counts as lost now, or None."""
    if node.seen_at is None:
        return "lost: it has not been heard from"
    quiet = now - node.seen_at
    if quiet > policy.lost_after:
        return f"lost: no heartbeat for {quiet:.0f} s (a node is lost after {policy.lost_after:.0f} s)"
    return None


def place(models: Iterable[Entry], nodes: Iterable[NodeView], replicas: Iterable[Replica], now: float, *,
          demand: Demand | None = None, policy: Policy = DEFAULT_POLICY,
          new_id: Callable[[str], str] | None = None) -> Plan:
    """Decide what to start and stop now. See the module's docstring for the rules."""
    p = Pass(models, nodes, replicas, now, demand or Demand(), policy, new_id)
    p.build()
    p.run()
    return p.plan


def _shard_id(model: str) -> str:
    return f"r_{secrets.token_hex(6)}"


def _idle(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


@dataclass
class _Model:
    """One model's replicas as the pass found them."""

    fresh: list[Replica] = field(default_factory=list)  # started with what the model says now
    old: list[Replica] = field(default_factory=list)  # started with something else: to replace
    pairs: dict[str, Replica] = field(default_factory=dict)  # old id → its replacement, not ready yet
    failed_recently: int = 0  # failed, waiting out retry_after: still counted, not yet replaced
    replacement_failed: set[str] = field(default_factory=set)  # old ids whose replacement failed recently



# Pass._key: replicas of the model there, a CPU model on a GPU node, memory free (negated), the node's name.
_RoomKey = tuple[int, int, int, str]
# One room in a need's heap: its key when pushed, the push's number (so rooms never compare), the room.
_HeapEntry = tuple[_RoomKey, int, Room]


class Pass:
    """One placement pass. `build` reads the cluster into rooms; `run` decides, model by model."""

    def __init__(self, models: Iterable[Entry], nodes: Iterable[NodeView], replicas: Iterable[Replica],
                 now: float, demand: Demand, policy: Policy, new_id: Callable[[str], str] | None) -> None:
        self.entries = {e.name: e for e in models}
        self.nodes = list(nodes)
        self.replicas = list(replicas)
        self.now = now
        self.demand = demand
        self.policy = policy
        self.new_id = new_id or _shard_id
        self.plan = Plan()
        self.rooms: dict[str, Room] = {}
        self.lost: dict[str, str] = {}
        self.live: dict[str, list[Replica]] = {}
        self.draining: list[Replica] = []
        self.failed: list[Replica] = []
        self.static = Static()
        self.state: dict[str, _Model] = {}
        self._needs: dict[str, list[Need]] = {}
        self._hashes: dict[str, list[str]] = {}
        self._eligible: dict[StaticKey, list[Room]] = {}
        self._heaps: dict[tuple[str, int], list[_HeapEntry]] = {}
        self._seq = 0
        self._evicted: set[str] = set()
        self._names: dict[str, str] | None = None

    # --- reading the cluster ---------------------------------------------------------------------

    def build(self) -> None:
        for node in self.nodes:
            why = node_lost(node, self.now, self.policy)
            if why:
                self.lost[node.id] = why
            else:
                self.rooms[node.id] = Room(node)
        for r in self.replicas:
            room = self.rooms.get(r.node_id)
            if room is None:
                if r.state in GONE and r.desired == "stop":
                    continue
                why = self.lost.get(r.node_id) or f"its node {r.node_id} is no longer known"
                self.plan.add(Lost(r.id, r.model, r.node_id, f"node {self._node_name(r.node_id)} {why}"))
                continue
            if r.state in GONE:
                if r.desired == "run":
                    self.failed.append(r)
                continue
            room.hold(r)
            if r.desired == "run":
                self.live.setdefault(r.model, []).append(r)
            else:
                self.draining.append(r)
        for name, listed in self.entries.items():
            self.state[name] = self._sort(listed, self.live.get(name, []))
        for r in self.failed:
            m = self.state.get(r.model)
            entry = self.entries.get(r.model)
            recent = self.now - r.since < self.policy.retry_after
            if entry is not None and (entry.stopped or entry.removed):
                self.plan.add(Stop(r.id, r.model, r.node_id, f"{r.state}, and its model is not to run",
                                   self.policy.stop_grace))
            elif m is not None and entry is not None and r.state == "parked" and self._current(entry, r):
                # Counted as a replica, so none is started in its place; said as why the model waits.
                m.failed_recently += 1
                self.plan.add(Wait(r.model, r.message or "parked"))
            elif m is not None and recent:
                if r.replaces:
                    m.replacement_failed.add(r.replaces)
                else:
                    m.failed_recently += 1
            else:
                what = f"{r.state}: {r.message}" if r.message else r.state
                self.plan.add(Stop(r.id, r.model, r.node_id, f"{what}; a new replica takes its place",
                                   self.policy.stop_grace))

    def _current(self, entry: Entry, r: Replica) -> bool:
        """Whether `r` was started with what its model says now (a restart or a change makes it out of date)."""
        hashes = self.hashes(entry)
        return r.profile < len(hashes) and r.profile_hash == hashes[r.profile]

    def _node_name(self, node_id: str) -> str:
        if self._names is None:
            self._names = {n.id: n.name for n in self.nodes}
        return self._names.get(node_id, node_id)

    def hashes(self, entry: Entry) -> list[str]:
        found = self._hashes.get(entry.name)
        if found is None:
            spec = entry.spec
            found = [spec.profile_hash(i, entry.restarts) for i in range(len(spec.profiles))]
            self._hashes[entry.name] = found
        return found

    def _sort(self, entry: Entry, reps: list[Replica]) -> _Model:
        hashes = self.hashes(entry)
        m = _Model()
        for r in reps:
            if r.profile < len(hashes) and r.profile_hash == hashes[r.profile]:
                m.fresh.append(r)
            else:
                m.old.append(r)
        old_ids = {r.id for r in m.old}
        for r in m.fresh:
            if r.replaces in old_ids:
                m.pairs[r.replaces] = r
        return m

    def needs(self, entry: Entry) -> list[Need]:
        found = self._needs.get(entry.name)
        if found is None:
            found = []
            for i, profile in enumerate(entry.spec.profiles):
                need = Need.of(entry.spec, i)
                if size := sized(profile, entry.weights_bytes):
                    need = dc_replace(need, cores=size[0], memory_mb=size[1])
                found.append(need)
            self._needs[entry.name] = found
        return found

    # --- deciding --------------------------------------------------------------------------------

    def run(self) -> None:
        for name, reps in self.live.items():
            if name not in self.entries:
                for r in reps:
                    self._stop(r, "its model is no longer in the catalog")
        entries = list(self.entries.values())
        regular = sorted((e for e in entries if not e.on_demand), key=lambda e: e.name)
        asked = sorted((e for e in entries if e.on_demand and e.name in self.demand.asked),
                       key=lambda e: (self.demand.asked[e.name], e.name))
        others = sorted((e for e in entries if e.on_demand and e.name not in self.demand.asked),
                        key=lambda e: e.name)
        for entry in [*regular, *asked, *others]:
            self._model(entry)

    def _stop(self, r: Replica, reason: str) -> None:
        self.plan.add(Stop(r.id, r.model, r.node_id, reason, self.policy.stop_grace))

    def target(self, entry: Entry, present: int) -> int:
        """How many replicas `entry` should have, with `present` counted now."""
        sc = entry.spec.scaling
        top = sc.max or sc.min
        if sc.on_demand is None:
            want = self.demand.wanted.get(entry.name, sc.min)
            return max(sc.min, min(want, top))
        # On demand: what is loaded stays loaded (it gives way only when
        # evicted); a request waiting loads one.
        want = max(sc.min, present)
        if entry.name in self.demand.asked:
            want = max(want, 1)
        want = max(want, self.demand.wanted.get(entry.name, 0))
        return min(want, max(top, 1))

    def _model(self, entry: Entry) -> None:
        name = entry.name
        m = self.state[name]
        reps = [r for r in (*m.fresh, *m.old) if r.id not in self._evicted]
        if entry.removed or entry.stopped:
            why = "removed from the catalog" if entry.removed else "stopped by an administrator"
            for r in reps:
                self._stop(r, why)
            if entry.removed and not reps and not any(d.model == name for d in self.draining):
                self._forget(entry)
            return
        # A replacement that is ready retires the replica it replaces.
        for o in list(m.old):
            new = m.pairs.get(o.id)
            if new is not None and new.state == "ready":
                self._stop(o, f"replaced by {new.id}, which is ready")
                m.old.remove(o)
                del m.pairs[o.id]
        fresh = [r for r in m.fresh if r.id not in self._evicted]
        old = [r for r in m.old if r.id not in self._evicted]
        present = len(fresh) + len(old) - len(m.pairs) + m.failed_recently
        wanted = self.target(entry, present)
        if present > wanted:
            self._scale_down(entry, m, fresh, old, present - wanted, wanted)
            old = [r for r in old if r.id not in self._stopped_ids()]
        elif present < wanted:
            for _ in range(wanted - present):
                if not self._start(entry, None, f"{name} wants {wanted} replicas and has {present}"):
                    break
        in_flight = [o for o in old if o.id in m.pairs or o.id in m.replacement_failed]
        if old and not in_flight:
            # One at a time: each replacement ready before the next begins.
            self._replace(entry, min(old, key=lambda r: (r.created_at, r.id)))

    def _stopped_ids(self) -> set[str]:
        return {a.shard_id for a in self.plan.stops}

    def _scale_down(self, entry: Entry, m: _Model, fresh: list[Replica], old: list[Replica], extra: int,
                    wanted: int) -> None:
        # Units that count as one replica each: a changed one alone, a fresh
        # one, or a changed one with its replacement on the way (both go).
        replacing = {r.id for r in m.pairs.values()}
        units: list[tuple[tuple[float, ...], list[Replica]]] = []
        for o in old:
            new = m.pairs.get(o.id)
            group = [o, new] if new is not None else [o]
            units.append(((0 if new is None else 3, -o.created_at), group))
        crowd: dict[str, int] = {}
        for r in fresh:
            crowd[r.node_id] = crowd.get(r.node_id, 0) + 1
        for r in fresh:
            if r.id in replacing:
                continue
            rank = 1 if r.state != "ready" else 2
            units.append(((rank, -crowd[r.node_id], -r.created_at), [r]))
        units.sort(key=lambda u: u[0])
        for _, group in units[:extra]:
            for r in group:
                self._stop(r, f"scaled to {wanted}")

    # --- starting --------------------------------------------------------------------------------

    def _key(self, room: Room, need: Need) -> _RoomKey:
        # Spread first (fewest replicas of this model), keep cards for models
        # that need them, then the most memory free. Every part only grows
        # as a room fills, which is what lets the heap be lazy.
        cpu_on_gpu_node = 1 if room.node.gpus and not need.gpu_count else 0
        return (room.count.get(need.model, 0), cpu_on_gpu_node, -room.memory, room.node.name)

    def _heap(self, need: Need) -> list[_HeapEntry]:
        key = (need.model, need.profile)
        heap: list[_HeapEntry] | None = self._heaps.get(key)
        if heap is None:
            heap = []
            for room in self.eligible(need):
                self._seq += 1
                heap.append((self._key(room, need), self._seq, room))
            heapq.heapify(heap)
            self._heaps[key] = heap
        return heap

    def eligible(self, need: Need) -> list[Room]:
        """The rooms `need` could ever take this pass, shared by every need of its kind."""
        kind = need.static_key
        found = self._eligible.get(kind)
        if found is None:
            found = [room for room in self.rooms.values() if self.static.refusal(room.node, need) is None]
            self._eligible[kind] = found
        return found

    def choose(self, entry: Entry) -> tuple[Room, Need, list[int]] | None:
        """The best room for a new replica of `entry` now, the profile it takes there and its cards."""
        for need in self.needs(entry):
            heap = self._heap(need)
            while heap:
                key, seq, room = heap[0]
                now_key = self._key(room, need)
                if now_key != key:
                    heapq.heapreplace(heap, (now_key, seq, room))
                    continue
                cards = room.fits(need)
                heapq.heappop(heap)
                if cards is None:
                    continue  # rooms only fill during a pass: it will not fit later in it either
                return room, need, cards
        return None

    def _start(self, entry: Entry, replaces: str | None, reason: str) -> bool:
        found = self.choose(entry)
        if found is None:
            if replaces is None:
                self._cannot(entry)
            return False
        room, need, cards = found
        shard_id = self.new_id(entry.name)
        spec = entry.spec
        self.plan.add(Start(
            shard_id=shard_id, model=entry.name, node_id=room.node.id, profile_index=need.profile,
            profile=spec.engine_profile(need.profile, cards), profile_hash=self.hashes(entry)[need.profile],
            cpu_cores=need.cores, memory_mb=need.memory_mb, gpus=tuple(cards), gpu_memory_mb=need.gpu_mb,
            replaces=replaces, reason=reason,
        ))
        room.take(entry.name, shard_id, need, cards)
        self._seq += 1
        heapq.heappush(self._heap(need), (self._key(room, need), self._seq, room))
        return True

    def _replace(self, entry: Entry, old: Replica) -> None:
        if self._start(entry, old.id, f"replaces {old.id}: its model changed or was restarted since it started"):
            return
        if entry.spec.replace == "in_place":
            self._stop(old, "replaced in place: its replacement needs its room, and starts once it is gone")
            return
        giving_back = list(self.draining)
        for m in self.state.values():
            giving_back += [r for r in m.old if r.id in m.pairs]
        if giving_back and self._fits_without(entry, giving_back):
            self.plan.add(Wait(entry.name, f"the replacement of {old.id} waits for room other restarts are "
                                           "giving back"))
        elif self._fits_without(entry, [old]):
            self.plan.add(Wait(entry.name, f"no room beside {old.id} for its replacement on any node; "
                                           "`llmgw ctl model gpus MODEL N --in-place` (or replace: in_place) "
                                           "stops it first"))
        else:
            self.plan.add(Wait(entry.name, f"the replacement of {old.id} fits on no node even with it stopped: "
                                           f"{self._summary(entry)}"))

    def _fits_without(self, entry: Entry, gone: Sequence[Replica]) -> bool:
        by_node: dict[str, list[Replica]] = {}
        for r in gone:
            by_node.setdefault(r.node_id, []).append(r)
        for node_id, rs in by_node.items():
            room = self.rooms.get(node_id)
            if room is None:
                continue
            for need in self.needs(entry):
                if self.static.refusal(room.node, need) is None and room.without(rs).fits(need) is not None:
                    return True
        return False

    # --- when nothing fits -----------------------------------------------------------------------

    def _cannot(self, entry: Entry) -> None:
        if self._evict_for(entry):
            return
        self.plan.add(Wait(entry.name, f"fits on no node: {self._summary(entry)}"))

    def _victims(self, room: Room, entry: Entry) -> tuple[list[Replica], list[tuple[Replica, str]]]:
        """On-demand replicas of other models on `room` that may give way now (longest idle first), and
        the ones that will later, said with how long they still have."""
        ready, later = [], []
        for r in room.replicas:
            other = self.entries.get(r.model)
            if (other is None or other.name == entry.name or r.desired != "run"
                    or r.id in self._evicted or r.state != "ready"):
                continue
            od = other.spec.scaling.on_demand
            if od is None:  # not on demand: kept however idle
                continue
            kept = sum(1 for x in self.live.get(other.name, []) if x.id not in self._evicted)
            if kept <= other.spec.scaling.min:
                continue
            used = max(self.demand.last_used.get(other.name, 0.0), r.since)
            idle, up = self.now - used, self.now - r.since
            if idle >= od.evict_after_idle and up >= od.min_lifetime:
                ready.append((-idle, r))
            elif idle < od.evict_after_idle:
                later.append((r, f"on-demand {r.model} ({r.id}) on {room.node.name}, idle "
                                 f"{_idle(idle)} of its {_idle(od.evict_after_idle)}"))
            else:
                later.append((r, f"on-demand {r.model} ({r.id}) on {room.node.name}, up {_idle(up)} of its "
                                 f"{_idle(od.min_lifetime)} min_lifetime"))
        ready.sort(key=lambda x: (x[0], x[1].id))
        return [r for _, r in ready], later

    def _evict_for(self, entry: Entry) -> bool:
        best: tuple[int, Room, list[Replica]] | None = None
        waits: list[str] = []
        for room in self.rooms.values():
            if not any(self.entries.get(r.model) and self.entries[r.model].on_demand for r in room.replicas):
                continue
            eligible = [n for n in self.needs(entry) if self.static.refusal(room.node, n) is None]
            if not eligible:
                continue
            victims, later = self._victims(room, entry)
            for k in range(1, len(victims) + 1):
                freed = room.without(victims[:k])
                if any(freed.fits(n) is not None for n in eligible):
                    if best is None or k < best[0]:
                        best = (k, room, victims[:k])
                    break
            if later and best is None:
                freed = room.without([*victims, *(r for r, _ in later)])
                if any(freed.fits(n) is not None for n in eligible):
                    waits.extend(text for _, text in later)
        if best is not None:
            _, room, victims = best
            for r in victims:
                used = max(self.demand.last_used.get(r.model, 0.0), r.since)
                self._stop(r, f"evicted after {_idle(self.now - used)} idle, for {entry.name}")
                self._evicted.add(r.id)
            names = ", ".join(f"{r.model} ({r.id})" for r in victims)
            self.plan.add(Wait(entry.name, f"waiting for {names} to give back room on {room.node.name}"))
            return True
        if waits:
            self.plan.add(Wait(entry.name, "the room it needs is held by " + "; ".join(waits[:SHOWN_NODES])))
            return True
        return False

    def _summary(self, entry: Entry) -> str:
        """The nodes' reasons for the model's first profile, shortest story first."""
        need = self.needs(entry)[0]
        said = []
        for node in sorted(self.nodes, key=lambda n: n.name):
            if node.id in self.lost:
                said.append(f"{node.name}: {self.lost[node.id]}")
                continue
            why = self.static.refusal(node, need)
            if why is None:
                reasons = self.rooms[node.id].why_not(need)
                why = reasons[0] if reasons else None
            if why:
                said.append(f"{node.name}: {why}")
        if not self.nodes:
            return "there are no nodes"
        more = len(said) - SHOWN_NODES
        text = "; ".join(said[:SHOWN_NODES])
        if more > 0:
            text += f"; and {more} more (llmgw ctl explain-placement {entry.name})"
        return text

    def _forget(self, entry: Entry) -> None:
        if entry.purge:
            used = {s for e in self.entries.values() if not e.removed for s in e.spec.weights()}
            sources = tuple(s for s in entry.spec.weights() if s not in used)
            if sources:
                for node_id in sorted(self.rooms):
                    self.plan.add(Purge(node_id, sources))
        self.plan.add(Forget(entry.name))
