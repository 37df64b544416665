"""`llmgw ctl explain-placement MODEL`: every node considered for a model, and why each was refused.

The same rules and the same figures as a placement pass (the verdicts are
read from the pass's own rooms before it places anything), and what that
pass would do for the model now, so "why is it not running" is answered
by the code that decides it rather than by a second guess at it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.fit import gb
from llmgw.control.catalog.placement import DEFAULT_POLICY, Demand, Entry, Pass, Policy
from llmgw.control.catalog.plan import Action, Start, Wait
from llmgw.store import Replica


@dataclass
class ProfileVerdict:
    profile: int
    engine: str
    fits: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class NodeVerdict:
    node_id: str
    name: str
    fits: bool
    """Whether a new replica of the model would fit here now, on one of its profiles."""
    replicas: int = 0
    """Replicas of this model already here."""
    profiles: list[ProfileVerdict] = field(default_factory=list)
    free: str = ""
    """What the node has free now, for people: "6 of 8 cores, 10.5 GB of 31.2 GB, GPU 0: 20.0 GB"."""

    @property
    def reasons(self) -> list[str]:
        return [r for p in self.profiles for r in p.reasons]


@dataclass
class Explanation:
    model: str
    state: str  # "running", "stopped", "removed", "waiting", "on demand, none loaded", "not in the catalog"
    wanted: int = 0
    running: int = 0
    ready: int = 0
    notes: list[str] = field(default_factory=list)
    nodes: list[NodeVerdict] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)


def explain(model: str, models: Iterable[Entry], nodes: Iterable[NodeView], replicas: Iterable[Replica],
            now: float, *, demand: Demand | None = None, policy: Policy = DEFAULT_POLICY) -> Explanation:
    """Why `model` runs where it does, or does not run: each node and each profile's verdict, and the plan."""
    entries = list(models)
    nodes = list(nodes)
    entry = next((e for e in entries if e.name == model), None)
    if entry is None:
        return Explanation(model, "not in the catalog", notes=[f"the catalog has no model named {model}"])
    p = Pass(entries, nodes, replicas, now, demand or Demand(), policy, None)
    p.build()
    verdicts = [_verdict(p, node, entry) for node in sorted(nodes, key=lambda n: (n.name, n.id))]
    live = p.live.get(model, [])
    present = len(live)
    wanted = p.target(entry, present) if not (entry.stopped or entry.removed) else 0
    p.run()
    actions = p.plan.for_model(model)
    out = Explanation(model, _state(entry, live, actions), wanted=wanted, running=present,
                      ready=sum(1 for r in live if r.state == "ready"), nodes=verdicts, actions=actions)
    sc = entry.spec.scaling
    scale = f"scaling: min {sc.min}, max {sc.max or sc.min}"
    if sc.on_demand is not None:
        scale += (f", on demand (evicted after {sc.on_demand.evict_after_idle} idle, "
                  f"not before {sc.on_demand.min_lifetime} up)")
    out.notes.append(scale)
    if entry.stopped:
        out.notes.append("stopped by an administrator: `llmgw ctl model start` runs it again")
    if entry.removed:
        out.notes.append("removed from the catalog; its replicas are stopping")
    if not nodes:
        out.notes.append("there are no nodes: add one with `llmgw node add`")
    out.notes += [a.reason for a in actions if isinstance(a, Wait)]
    return out


def _state(entry: Entry, live: list[Replica], actions: list[Action]) -> str:
    if entry.removed:
        return "removed"
    if entry.stopped:
        return "stopped"
    if any(isinstance(a, Wait) for a in actions):
        return "waiting"
    if entry.on_demand and not live and not any(isinstance(a, Start) for a in actions):
        return "on demand, none loaded"
    return "running"


def _verdict(p: Pass, node: NodeView, entry: Entry) -> NodeVerdict:
    here = sum(1 for r in p.live.get(entry.name, []) if r.node_id == node.id)
    if node.id in p.lost:
        return NodeVerdict(node.id, node.name, False, here,
                           [ProfileVerdict(-1, "", False, [p.lost[node.id]])])
    room = p.rooms[node.id]
    profiles = []
    for need in p.needs(entry):
        static = p.static.refusal(node, need)
        reasons = [static] if static else room.why_not(need)
        profiles.append(ProfileVerdict(need.profile, need.engine, not reasons, reasons))
    free = [f"{max(room.cores, 0)} of {node.cores} cores", f"{gb(max(room.memory, 0))} of {gb(node.memory_mb)}"]
    for i, g in enumerate(node.gpus):
        free.append(f"GPU {g.index} ({g.cls}): {gb(max(room.gpu_free[i], 0))}")
    return NodeVerdict(node.id, node.name, any(v.fits for v in profiles), here, profiles, ", ".join(free))


def view(explanation: Explanation) -> dict[str, Any]:
    """The explanation as JSON for the admin API and `--json`."""
    doc = dataclasses.asdict(explanation)
    doc["actions"] = [action_view(a) for a in explanation.actions]
    for node, verdict in zip(doc["nodes"], explanation.nodes, strict=True):
        node["reasons"] = verdict.reasons
    return doc


def action_view(action: Action) -> dict[str, Any]:
    doc = {"action": type(action).__name__.lower(), **dataclasses.asdict(action)}
    return doc


def action_line(a: dict[str, Any]) -> str:
    """An action_view() as the one line `ctl explain-placement` and the cluster's MCP tool print."""
    kind = a["action"]
    if kind == "start":
        cards = f" on GPUs {','.join(map(str, a['gpus']))}" if a["gpus"] else ""
        return f"start {a['shard_id']} on {a['node_id']}{cards} (profile {a['profile_index']}): {a['reason']}"
    if kind in ("stop", "lost"):
        return f"{kind} {a['shard_id']} on {a['node_id']}: {a['reason']}"
    if kind == "wait":
        return f"wait: {a['reason']}"
    if kind == "purge":
        return f"delete {', '.join(a['sources'])} on {a['node_id']}"
    return f"{kind} {a.get('model', '')}"
