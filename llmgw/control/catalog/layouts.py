"""The ways this cluster could run a model, before anything is fetched: `llmgw ctl model plan`.

Given what is known of a model without its weights (their size, its layers and KV heads, the share of it a
token reads) and the nodes as they are, each way is judged in figures a person can check:

    one card                 the whole model and its context on one card
    tensor parallel          every layer cut across 2, 4 or 8 of a node's cards (vLLM; safetensors)
    layer split              runs of layers on each of a node's cards, taking turns (llama.cpp; GGUF)
    CPU, layers on a card    the layers that fit on the node's largest card there, the rest in its memory
    CPU                      the node's memory alone
    pipeline across nodes    runs of layers on several nodes over a fabric

For each: what it needs of each card (weights, context, the engine's own) against what a card can give,
the room left for more context, about how many tokens a second one reply gets, or why it is not offered.

The numbers, and where they come from:
- A card gives 90% of its memory, less what other programs hold on it: the rest is the driver's and
  fragmentation's.
- The engine's own: vLLM and SGLang keep 2 GB and a fiftieth of the weights a card; llama.cpp 0.5 GB.
- The context is the KV cache at f16: `kv_bytes_per_token` × the tokens planned, divided like the weights.
- A token reads every weight once on a dense model; a model of experts reads its active share, times 1.6
  for the experts' uneven use (the original's measurement of Qwen3-Coder-30B-A3B).
- On a CPU a reply gets the node's measured memory bandwidth over those bytes (within 15% of llama.cpp's
  own timings from 1.5B to 14B, in the original). On a card, half its memory bandwidth, known from its
  name (CARD_BANDWIDTH), over them: 0.41 and 0.56 of the bandwidth were measured on an RTX 6000 Ada for a
  model of experts and a dense 8B.
- Tensor parallel divides what each card reads and pays two all-reduces a layer: 0.85 of the ideal over
  NVLink, 0.6 over PCIe. A layer split and a pipeline take turns: no faster than one of their cards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from llmgw.control.catalog.cluster import GPUView, NodeView

GB = 1024**3
USABLE = 0.9
GPU_EFFICIENCY = 0.5
EXPERTS_READ = 1.6
TP_NVLINK, TP_PCIE = 0.85, 0.6
TP_WIDTHS = (2, 4, 8)
FP8_CC = 8.9

# Memory bandwidth in GB/s by the card's name as the driver gives it, most specific first; a card not here
# gets no tokens-a-second figure rather than a guess.
CARD_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("gh200", 4000), ("h200", 4800), ("h100 nvl", 3900), ("h100 pcie", 2000), ("h100", 3350), ("b200", 8000),
    ("a100-sxm4-80gb", 2039), ("a100 80gb", 1935), ("a100", 1555), ("l40s", 864), ("l40", 864),
    ("rtx 6000 ada", 960), ("rtx a6000", 768), ("quadro rtx 6000", 672), ("a10g", 600), ("a10", 600),
    ("l4", 300), ("t4", 320), ("v100", 900), ("rtx 4090", 1008), ("rtx 3090", 936),
)

Kind = Literal["one card", "tensor parallel", "layer split", "cpu offload", "cpu", "pipeline"]


def card_bandwidth(name: str) -> float:
    """The card's memory bandwidth in GB/s by its name; 0 when it is not known."""
    lowered = name.lower()
    for part, gbs in CARD_BANDWIDTH:
        if part in lowered:
            return gbs
    return 0.0


@dataclass(frozen=True)
class ModelShape:
    """What the plan knows of a model before its weights are fetched."""

    weights_bytes: int
    format: Literal["gguf", "safetensors"] = "gguf"
    layers: int = 0
    kv_heads: int = 0
    kv_bytes_per_token: int = 0
    """At f16; 0 when not known (the context's cost is then left out and said so)."""
    active_share: float = 1.0
    """The part of the weights one token reads: below 1 for a model of experts."""
    fp8: bool = False
    trained_context: int = 0

    @property
    def read_per_token(self) -> float:
        """The bytes one token reads."""
        if self.active_share >= 1:
            return float(self.weights_bytes)
        return self.weights_bytes * min(1.0, self.active_share * EXPERTS_READ)

    @property
    def engine(self) -> str:
        return "llamacpp" if self.format == "gguf" else "vllm"

    def overhead(self, cards: int) -> float:
        """The engine's own on each card, in bytes."""
        if self.engine == "llamacpp":
            return 0.5 * GB
        return 2 * GB + self.weights_bytes / cards / 50


@dataclass(frozen=True)
class Layout:
    kind: Kind
    engine: str
    nodes: tuple[str, ...] = ()
    cards: int = 0
    card_class: str = ""
    weights_gb: float = 0.0
    """On each card (all of it for CPU)."""
    context_gb: float = 0.0
    engine_gb: float = 0.0
    usable_gb: float = 0.0
    """What each card (or the node's memory) can give."""
    room_tokens: int = 0
    """Tokens of context the room left would still hold, beyond the context planned."""
    tokens_per_s: float = 0.0
    """About how fast one reply comes; 0 when a bandwidth it needs is not known."""
    offered: bool = False
    why_not: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    memory_gb: float = 0.0
    """What the node's own memory holds of it: all of it on the CPU, the rest beside the card when offloaded."""
    layers_on_card: int = 0
    """When offloaded: the layers the card takes (llama.cpp's -ngl)."""

    @property
    def need_gb(self) -> float:
        return self.weights_gb + self.context_gb + self.engine_gb


def plan(shape: ModelShape, nodes: Sequence[NodeView], context: int) -> list[Layout]:
    """Every way the nodes could run `shape` at `context` tokens, those offered first (fewest cards, then the
    fastest), then those not, each saying why."""
    kv = shape.kv_bytes_per_token * context
    ways: list[Layout] = []
    for node in nodes:
        for group in _card_groups(node):
            ways.extend(_on_cards(shape, node, group, kv))
        if shape.format == "gguf":
            ways.append(_on_cpu(shape, node, kv))
            if node.gpus:
                ways.append(_offloaded(shape, node, kv))
    ways.append(_pipeline(shape, nodes))
    # On cards before CPUs; then the fewest cards; then the fastest.
    rank = {"cpu offload": 1, "cpu": 2}
    offered = sorted((w for w in ways if w.offered), key=lambda w: (rank.get(w.kind, 0), w.cards, -w.tokens_per_s))
    refused = [w for w in ways if not w.offered]
    return _distinct(offered) + _distinct(refused)


def _distinct(ways: list[Layout]) -> list[Layout]:
    """Nodes whose way is the same in every figure are one line naming them all: eight alike say it once."""
    seen: dict[tuple[object, ...], Layout] = {}
    for w in ways:
        key = (w.kind, w.cards, w.card_class, w.why_not, w.tokens_per_s, round(w.usable_gb, 1), w.notes)
        if key in seen:
            first = seen[key]
            seen[key] = dataclasses.replace(first, nodes=(*first.nodes, *w.nodes))
        else:
            seen[key] = w
    return list(seen.values())


def _card_groups(node: NodeView) -> list[list[GPUView]]:
    """The node's cards by class, largest memory first: a replica spans cards of one class."""
    by_class: dict[str, list[GPUView]] = {}
    for g in node.gpus:
        by_class.setdefault(g.cls, []).append(g)
    return sorted(by_class.values(), key=lambda cards: -cards[0].memory_mb)


def _usable(card: GPUView) -> float:
    return max(0.0, (card.memory_mb - card.foreign_mb) * 1024 * 1024 * USABLE)


def _room(shape: ModelShape, left: float, cards: int) -> int:
    if shape.kv_bytes_per_token <= 0 or left <= 0:
        return 0
    return int(left * cards / shape.kv_bytes_per_token)


def _on_cards(shape: ModelShape, node: NodeView, group: list[GPUView], kv: int) -> list[Layout]:
    ways = []
    usable = min(_usable(g) for g in group)
    cls = group[0].cls
    bandwidth = card_bandwidth(group[0].name)
    refused_cc = shape.fp8 and max(g.cc for g in group) < FP8_CC
    widths = [1] + [n for n in ((2, 3, 4, 5, 6, 7, 8) if shape.engine == "llamacpp" else TP_WIDTHS)
                    if n <= len(group)]
    for n in widths:
        kind: Kind = "one card" if n == 1 else "layer split" if shape.engine == "llamacpp" else "tensor parallel"
        weights, context_part, engine = shape.weights_bytes / n, kv / n, shape.overhead(n)
        need = weights + context_part + engine
        why = ""
        if refused_cc:
            why = f"FP8 needs a card of compute capability {FP8_CC} or more; {cls} is {group[0].cc}"
        elif kind == "tensor parallel" and shape.kv_heads and shape.kv_heads % n and n % shape.kv_heads:
            why = f"{n} cards do not divide the model's {shape.kv_heads} KV heads"
        elif need > usable:
            why = f"needs {need / GB:.1f} GB a card; a {cls} gives {usable / GB:.1f}"
        speed = 0.0
        if bandwidth and shape.read_per_token:
            one = bandwidth * GB * GPU_EFFICIENCY / shape.read_per_token
            if kind == "tensor parallel":
                linked = all(set(g.index for g in group[:n]) - {g.index} <= set(g.nvlink) for g in group[:n])
                speed = one * n * (TP_NVLINK if linked else TP_PCIE)
            else:
                speed = one  # a layer split takes turns: no faster than one card
        notes = () if shape.kv_bytes_per_token else ("the context's cost is not known: not counted",)
        ways.append(Layout(kind, shape.engine, (node.name,), n, cls, weights / GB, context_part / GB, engine / GB,
                           usable / GB, _room(shape, usable - need, n), round(speed, 1), not why, why, notes))
        if not why and n > 1:
            break  # the fewest cards that hold it; more of them only say the same
    return ways


def _on_cpu(shape: ModelShape, node: NodeView, kv: int) -> Layout:
    usable = node.memory_mb * 1024 * 1024 * USABLE
    need = shape.weights_bytes + kv + 1 * GB
    why = "" if need <= usable else f"needs {need / GB:.1f} GB of memory; {node.name} gives {usable / GB:.1f}"
    speed = node.mem_bandwidth_gbs * GB / shape.read_per_token if node.mem_bandwidth_gbs else 0.0
    notes = () if node.mem_bandwidth_gbs else (f"{node.name}'s memory bandwidth is not measured yet",)
    return Layout("cpu", "llamacpp", (node.name,), 0, "", shape.weights_bytes / GB, kv / GB, 1.0, usable / GB,
                  _room(shape, usable - need, 1), round(speed, 1), not why, why, notes, memory_gb=need / GB)


def _offloaded(shape: ModelShape, node: NodeView, kv: int) -> Layout:
    card = max(node.gpus, key=_usable)
    on_card = max(0.0, min(float(shape.weights_bytes), _usable(card) - shape.overhead(1)))
    share = on_card / shape.weights_bytes if shape.weights_bytes else 0.0
    layers = int(shape.layers * share) if shape.layers else 0
    in_memory = shape.weights_bytes - on_card + kv + 1 * GB
    usable = node.memory_mb * 1024 * 1024 * USABLE
    why = ""
    if share >= 1:
        why = "the whole model fits on one card: see one card"
    elif in_memory > usable:
        why = f"needs {in_memory / GB:.1f} GB of memory beside the card; {node.name} gives {usable / GB:.1f}"
    speed = 0.0
    gpu_bw = card_bandwidth(card.name)
    if node.mem_bandwidth_gbs and gpu_bw:
        read = shape.read_per_token
        seconds = read * (1 - share) / (node.mem_bandwidth_gbs * GB) + read * share / (gpu_bw * GB * GPU_EFFICIENCY)
        speed = 1 / seconds
    notes = (f"{layers} of {shape.layers} layers on the card",) if layers else ()
    return Layout("cpu offload", "llamacpp", (node.name,), 1, card.cls, on_card / GB, kv / GB, 1.0 + 0.5,
                  usable / GB, 0, round(speed, 1), not why, why, notes, memory_gb=in_memory / GB,
                  layers_on_card=layers)


def _pipeline(shape: ModelShape, nodes: Sequence[NodeView]) -> Layout:
    why = ("no two nodes report a fabric (InfiniBand or RoCE) between them, which a pipeline across nodes needs"
           if len(nodes) > 1 else "one node: a pipeline runs across several")
    return Layout("pipeline", "vllm", tuple(n.name for n in nodes), 0, "", 0, 0, 0, 0, 0, 0, False, why)
