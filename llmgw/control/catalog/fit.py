"""Whether a replica fits on a node, and when it does not, why — in figures a person can act on.

`Need` is what one profile of a model asks of a node; `Room` is what a node
has left once the replicas already there are counted (what each holds is on
its row, as it was started) and the memory other programs hold on its cards
is set aside. `static_refusal` is what no amount of waiting changes (the
engine, labels, the cards it has); `fits` is the quick yes-or-no placement
asks thousands of times a pass, and `why_not` the sentences for explain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from llmgw.control.catalog.cluster import GPUView, NodeView, class_matches
from llmgw.control.catalog.spec import MB, ROLE_LABEL, ModelSpec
from llmgw.store import Replica


def gb(mb: float) -> str:
    """Megabytes as people read them: 8.0 GB, 512 MB."""
    if abs(mb) < 1024:
        return f"{int(mb)} MB"
    return f"{mb / 1024:.1f} GB"


# Need.static_key: engine, selector, GPU count, memory on each card, classes, compute capability.
StaticKey = tuple[str, tuple[tuple[str, str], ...], int, int, tuple[str, ...], float]


@dataclass(frozen=True)
class Need:
    """What a replica on one profile of a model asks of a node."""

    model: str
    profile: int
    engine: str
    cores: int = 0
    memory_mb: int = 0
    gpu_count: int = 0
    gpu_mb: int = 0  # on each card; 0 is the whole card
    classes: tuple[str, ...] = ()
    min_cc: float = 0.0
    selector: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, spec: ModelSpec, index: int) -> Need:
        p = spec.profiles[index]
        g = p.gpus
        return cls(
            model=spec.name, profile=index, engine=p.engine, cores=p.cpu_cores, memory_mb=int(p.memory) // MB,
            gpu_count=g.count if g else 0, gpu_mb=int(g.memory) // MB if g else 0,
            classes=tuple(c.lower() for c in g.classes) if g else (), min_cc=g.min_cc if g else 0.0,
            selector=tuple(sorted(p.node_selector.items())),
        )

    @functools.cached_property
    def static_key(self) -> StaticKey:
        """What static_refusal reads: needs alike share one answer per node."""
        return (self.engine, self.selector, self.gpu_count, self.gpu_mb, self.classes, self.min_cc)

    def card_ok(self, gpu: GPUView) -> bool:
        if self.classes and not any(class_matches(c, gpu.cls) for c in self.classes):
            return False
        if self.min_cc and gpu.cc < self.min_cc:
            return False
        return gpu.memory_mb - gpu.foreign_mb >= self.gpu_mb

    def describe_cards(self) -> str:
        what = f"{self.gpu_count} GPU{'s' if self.gpu_count != 1 else ''}"
        parts = []
        if self.classes:
            parts.append(f"of class {' or '.join(self.classes)}")
        if self.min_cc:
            parts.append(f"of compute capability {self.min_cc:g} or later")
        if self.gpu_mb:
            parts.append(f"with {gb(self.gpu_mb)} free each")
        else:
            parts.append("whole")
        return " ".join([what, *parts])


class Room:
    """What one node has left: cores, memory, and each card's free memory and holders."""

    __slots__ = ("node", "cores", "memory", "gpu_free", "gpu_holders", "position", "count", "replicas")

    def __init__(self, node: NodeView) -> None:
        self.node = node
        self.cores = node.cores
        self.memory = node.memory_mb
        self.gpu_free = [g.memory_mb - g.foreign_mb for g in node.gpus]
        self.gpu_holders: list[list[tuple[str, str, bool]]] = [[] for _ in node.gpus]  # (model, shard, whole)
        self.position = {g.index: i for i, g in enumerate(node.gpus)}
        self.count: dict[str, int] = {}
        self.replicas: list[Replica] = []

    def hold(self, r: Replica) -> None:
        self._take(r.model, r.id, r.cpu_cores, r.memory_mb, r.gpus, r.gpu_memory_mb)
        self.replicas.append(r)

    def take(self, model: str, shard_id: str, need: Need, cards: list[int]) -> None:
        self._take(model, shard_id, need.cores, need.memory_mb, cards, need.gpu_mb)

    def _take(self, model: str, shard_id: str, cores: int, memory: int, cards: list[int], card_mb: int) -> None:
        self.cores -= cores
        self.memory -= memory
        for index in cards:
            i = self.position.get(index)
            if i is None:
                continue  # a card the node no longer reports
            whole = card_mb == 0
            self.gpu_free[i] -= self.node.gpus[i].memory_mb if whole else card_mb
            self.gpu_holders[i].append((model, shard_id, whole))
        self.count[model] = self.count.get(model, 0) + 1

    def without(self, gone: list[Replica]) -> Room:
        """This room as it would be once `gone` (replicas held here) have stopped."""
        ids = {r.id for r in gone}
        copy = Room(self.node)
        for r in self.replicas:
            if r.id not in ids:
                copy.hold(r)
        return copy

    def free_cards(self, need: Need) -> list[int]:
        """Indexes of the cards that can take `need` now, best fit first."""
        out = []
        for i, g in enumerate(self.node.gpus):
            if not need.card_ok(g):
                continue
            holders = self.gpu_holders[i]
            if need.gpu_mb == 0:
                if not holders:
                    out.append((0, g.index))
            elif not any(whole for _, _, whole in holders) and self.gpu_free[i] >= need.gpu_mb:
                out.append((self.gpu_free[i], g.index))
        out.sort()
        return [index for _, index in out]

    def fits(self, need: Need) -> list[int] | None:
        """The cards a replica of `need` would take here (maybe none), or None when it does not fit."""
        if need.cores > self.cores or need.memory_mb > self.memory:
            return None
        if not need.gpu_count:
            return []
        cards = self.free_cards(need)
        if len(cards) < need.gpu_count:
            return None
        return sorted(cards[: need.gpu_count])

    def why_not(self, need: Need) -> list[str]:
        """Why a replica of `need` does not fit here now, every reason, with the figures."""
        node = self.node
        reasons = []
        if need.memory_mb > self.memory:
            reasons.append(f"not enough memory: needs {gb(need.memory_mb)}, free {gb(max(self.memory, 0))} "
                           f"of {gb(node.memory_mb)}")
        if need.cores > self.cores:
            reasons.append(f"not enough cores: needs {need.cores}, free {max(self.cores, 0)} of {node.cores}")
        if need.gpu_count:
            cards = self.free_cards(need)
            if len(cards) < need.gpu_count:
                reasons.append(f"needs {need.describe_cards()}, {len(cards)} free: {self._cards_said(need)}")
        return reasons

    def _cards_said(self, need: Need) -> str:
        parts = []
        for i, g in enumerate(self.node.gpus):
            if not need.card_ok(g):
                continue
            holders = self.gpu_holders[i]
            held = ", ".join(f"{m}/{s}" for m, s, _ in holders)
            if any(whole for _, _, whole in holders):
                parts.append(f"GPU {g.index} held whole by {held}")
            elif need.gpu_mb == 0 and holders:
                parts.append(f"GPU {g.index} shared with {held}")
            elif need.gpu_mb == 0:
                parts.append(f"GPU {g.index} is free")
            else:
                text = f"GPU {g.index} has {gb(max(self.gpu_free[i], 0))} free"
                if g.foreign_mb:
                    text += f" ({gb(g.foreign_mb)} held by other programs)"
                if holders:
                    text += f", beside {held}"
                parts.append(text)
        return "; ".join(parts) or "none"


@dataclass
class Static:
    """Answers of static_refusal, cached per need's kind and node for one pass."""

    cache: dict[tuple[StaticKey, str], str | None] = field(default_factory=dict)

    def refusal(self, node: NodeView, need: Need) -> str | None:
        key = (need.static_key, node.id)
        if key not in self.cache:
            self.cache[key] = static_refusal(node, need)
        return self.cache[key]


def static_refusal(node: NodeView, need: Need) -> str | None:
    """Why `need` can never be placed on `node` as it is (engine, labels, cards), or None."""
    if need.engine not in node.engines:
        has = ", ".join(sorted(node.engines)) or "none"
        return f"engine {need.engine} is not on this node, or is disabled there (it has: {has})"
    wanted = dict(need.selector)
    for key, value in need.selector:
        have = node.labels.get(key)
        if have != value:
            said = f"has {key}={have}" if have is not None else f"has no {key} label"
            return f"labels: the profile wants {key}={value}, the node {said}"
    role = node.labels.get(ROLE_LABEL)
    if role and wanted.get(ROLE_LABEL) != role:
        # A judge's machine is the judges' alone: with another model beside
        # it, 38 of 60 requests were refused for want of a judgment.
        return f"kept for {ROLE_LABEL}={role}, which this profile does not select"
    if need.gpu_count:
        if not node.gpus:
            return f"no GPUs; the profile needs {need.describe_cards()}"
        good = [g for g in node.gpus if need.card_ok(g)]
        if len(good) < need.gpu_count:
            cards = "; ".join(_card_refusal(need, g) for g in node.gpus if not need.card_ok(g))
            return (f"needs {need.describe_cards()}; it has {len(good)} such of {len(node.gpus)}"
                    + (f" ({cards})" if cards else ""))
    return None


def _card_refusal(need: Need, g: GPUView) -> str:
    if need.classes and not any(class_matches(c, g.cls) for c in need.classes):
        return f"GPU {g.index} is {g.cls}"
    if need.min_cc and g.cc < need.min_cc:
        return f"GPU {g.index} ({g.cls}) is compute capability {g.cc:g}"
    usable = g.memory_mb - g.foreign_mb
    said = f"GPU {g.index} ({g.cls}) has {gb(usable)}"
    if g.foreign_mb:
        said += f" besides {gb(g.foreign_mb)} held by other programs"
    return said
