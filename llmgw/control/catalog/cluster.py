"""The cluster as placement reads it: each node's hardware, labels and engines, flattened once a pass.

Built from what the agents said (Register, the latest Heartbeat) or from the
store's NodeRecord that keeps them; placement never reads the protocol's
messages itself, so a thousand nodes are looked at once, not at every replica.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmgw.protocol import GPU, Heartbeat, Register, from_dict
from llmgw.store import NodeRecord

_VENDOR = {"nvidia", "geforce", "tesla", "quadro"}
_FORM = re.compile(r"^(pcie|sxm\d*|hbm\d*e?|nvl|generation|\d+gb)$")
_JOINED = {"rtx", "gtx", "titan"}


def gpu_family(name: str) -> str:
    """A card's family from its name: "NVIDIA H100 80GB HBM3" → h100, "Quadro RTX 6000" → rtx6000."""
    words = [w for w in re.split(r"[\s_-]+", name.lower()) if w and w not in _VENDOR and not _FORM.match(w)]
    if not words:
        return "gpu"
    family = words[0]
    if family in _JOINED and len(words) > 1:
        family += words[1]
        if "ada" in words[2:]:
            family += "ada"
    return family


def gpu_class(gpu: GPU) -> str:
    """A card's class, its family and memory: h100-80g, a100-40g, rtx6000-24g; a MIG slice adds its profile."""
    gb = round(gpu.memory_mb / 1024) if gpu.memory_mb else 0
    cls = f"{gpu_family(gpu.name)}-{gb}g"
    if gpu.mig is not None and gpu.mig.profile:
        cls += f"-mig-{gpu.mig.profile}"
    return cls


def class_matches(wanted: str, cls: str) -> bool:
    """A profile's class matches a card's own (h100-80g) or its family (h100)."""
    wanted = wanted.strip().lower()
    return cls == wanted or cls.startswith(wanted + "-")


@dataclass(frozen=True)
class GPUView:
    index: int
    cls: str
    memory_mb: int
    foreign_mb: int = 0  # held by processes that are not llmgw's engines
    cc: float = 0.0
    name: str = ""
    nvlink: tuple[int, ...] = ()
    """The indexes of the node's cards this one has NVLink to."""


@dataclass
class NodeView:
    """One node, as placement needs it."""

    id: str
    name: str
    cores: int = 0
    memory_mb: int = 0
    gpus: tuple[GPUView, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    engines: frozenset[str] = frozenset()
    seen_at: float | None = None
    """When it last said anything (a heartbeat): a node silent past the lost timeout is lost."""
    state: str = ""
    mem_bandwidth_gbs: float = 0.0
    """How fast its memory reads, as its agent measured it; 0 until measured. What a model's speed on its CPUs
    is judged by."""

    @classmethod
    def of(cls, register: Register, heartbeat: Heartbeat | None = None, seen_at: float | None = None,
           labels: dict[str, str] | None = None, state: str = "") -> NodeView:
        host = register.host
        foreign = heartbeat.gpu_foreign_memory_mb if heartbeat else []
        gpus = []
        for i, g in enumerate(register.gpus):
            held = foreign[i] if i < len(foreign) else 0
            try:
                cc = float(g.compute_capability) if g.compute_capability else 0.0
            except ValueError:
                cc = 0.0
            gpus.append(GPUView(g.index, gpu_class(g), g.memory_mb, max(0, held), cc, g.name, tuple(g.nvlink_peers)))
        return cls(
            id=register.node_id, name=register.name,
            cores=(host.cpu_threads or host.cpu_cores) if host else 0,
            memory_mb=host.memory_mb if host else 0,
            gpus=tuple(gpus),
            labels={**register.labels, **(labels or {})},
            engines=frozenset(register.engines),
            seen_at=seen_at if seen_at is not None else (heartbeat.at if heartbeat else None),
            state=state,
            mem_bandwidth_gbs=(heartbeat.mem_bandwidth_gbs if heartbeat and heartbeat.mem_bandwidth_gbs
                               else host.mem_bandwidth_gbs if host else 0.0),
        )

    @classmethod
    def from_record(cls, record: NodeRecord) -> NodeView:
        register = from_dict(Register, record.register, "register")
        heartbeat = from_dict(Heartbeat, record.heartbeat, "heartbeat") if record.heartbeat else None
        view = cls.of(register, heartbeat, record.heartbeat_at, record.labels, record.state)
        # The record's id is the one the certificate proved; its name is the one shown.
        view.id, view.name = record.id, record.name
        return view
