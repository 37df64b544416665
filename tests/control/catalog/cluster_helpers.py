"""A small cluster for placement tests: nodes, models, and a reconciler that carries plans out at once."""

from __future__ import annotations

import itertools
from dataclasses import replace

from llmgw.control.catalog import Demand, Entry, NodeView, Policy, load_spec, place
from llmgw.control.catalog.plan import Forget, Lost, Start, Stop
from llmgw.protocol import GPU, Heartbeat, Host, Register
from llmgw.store import Replica

NOW = 1_800_000_000.0


def node(name: str, cores: int = 8, memory_gb: float = 32, gpus=(), engines=("llamacpp", "sim", "vllm"),
         labels: dict | None = None, seen: float | None = NOW, foreign=()) -> NodeView:
    """gpus: (name, memory in GB, compute capability) for each card."""
    register = Register(
        node_id=f"id-{name}", name=name, version="test",
        host=Host(hostname=name, cpu_cores=cores, cpu_threads=cores, memory_mb=int(memory_gb * 1024)),
        gpus=[GPU(index=i, name=n, memory_mb=int(m * 1024), compute_capability=cc)
              for i, (n, m, cc) in enumerate(gpus)],
        engines={e: "1" for e in engines}, labels=labels or {},
    )
    return NodeView.of(register, Heartbeat(at=seen or 0, gpu_foreign_memory_mb=list(foreign)), seen_at=seen)


def model(name: str = "qwen", engine: str = "llamacpp", cores: int = 2, memory: str = "4GB", gpus: dict | None = None,
          selector: dict | None = None, min: int = 1, max: int = 0, on_demand: dict | None = None,
          profiles: list | None = None, **extra) -> Entry:
    profile = {"engine": engine, "cpu_cores": cores, "memory": memory}
    if gpus:
        profile["gpus"] = gpus
    if selector:
        profile["node_selector"] = selector
    scaling = {"min": min, "max": max}
    if on_demand is not None:
        scaling["on_demand"] = on_demand
    doc = {"name": name, "source": f"/models/{name}.gguf", "profiles": profiles or [profile], "scaling": scaling,
           **extra}
    return Entry(load_spec(doc))


class Cluster:
    """Models, nodes and replicas; `step()` runs a pass and does what its plan says, as the reconciler would."""

    def __init__(self, nodes, models, policy: Policy | None = None):
        self.nodes = {n.id: n for n in nodes}
        self.models = {m.name: m for m in models}
        self.replicas: dict[str, Replica] = {}
        self.policy = policy if policy is not None else Policy()
        self.now = NOW
        self.demand = Demand()
        self._ids = itertools.count(1)
        self.forgotten: list[str] = []
        self.silent: set[str] = set()  # nodes whose heartbeats stopped; the rest beat at every pass

    def beat(self) -> None:
        for node_id, n in self.nodes.items():
            if node_id not in self.silent:
                self.nodes[node_id] = replace(n, seen_at=self.now)

    def new_id(self, model: str) -> str:
        return f"{model}-{next(self._ids)}"

    def plan(self):
        self.beat()
        return place(self.models.values(), self.nodes.values(), self.replicas.values(), self.now,
                     demand=self.demand, policy=self.policy, new_id=self.new_id)

    def step(self, ready: bool = True):
        """One pass, carried out: starts become replicas (ready at once unless told), stops stop."""
        plan = self.plan()
        for a in plan.ordered():
            if isinstance(a, Lost):
                self.replicas[a.shard_id] = replace(self.replicas[a.shard_id], state="failed", desired="stop",
                                                    since=self.now, message=a.reason)
            elif isinstance(a, Stop):
                self.replicas[a.shard_id] = replace(self.replicas[a.shard_id], state="stopped", desired="stop",
                                                    since=self.now)
            elif isinstance(a, Start):
                r = a.replica(self.now)
                self.replicas[a.shard_id] = replace(r, state="ready" if ready else "starting")
            elif isinstance(a, Forget):
                del self.models[a.model]
                self.forgotten.append(a.model)
        return plan

    def set(self, shard_id: str, **changes) -> None:
        self.replicas[shard_id] = replace(self.replicas[shard_id], **changes)

    def running(self, model: str | None = None) -> list[Replica]:
        return sorted((r for r in self.replicas.values() if r.desired == "run" and r.state not in ("stopped", "failed")
                       and (model is None or r.model == model)), key=lambda r: r.id)

    def where(self, model: str) -> list[str]:
        names = {n.id: n.name for n in self.nodes.values()}
        return sorted(names[r.node_id] for r in self.running(model))

    def change(self, name: str, **spec_changes) -> None:
        entry = self.models[name]
        doc = {**entry.spec.to_doc(), **spec_changes}
        self.models[name] = replace(entry, spec=load_spec(doc))
