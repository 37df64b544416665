"""The explorer: what this cluster can run, of what a hub's search finds, before anything is fetched.

For each repository the search lists, its files are read at the commit (sizes and Hugging Face's scan) and
each weight format it offers — every GGUF quantisation (a split one as a whole), the safetensors checkpoint —
is judged through the same planner as `llmgw ctl model plan` (layouts.py) on the nodes as they are, at 4,096
tokens of context: by its size, and by the layers and attention its smallest GGUF's header (the first 256 KiB)
and its config.json say, so the room its context takes is counted as serving would count it (by size alone
where they cannot be read). What cannot run here is left out and counted, by why:

    too big       no way the planner offers fits any node
    fp8           FP8 weights, and no card of compute capability 8.9 or more
    mlx           Apple's MLX format, which no engine here runs
    no weights    neither GGUF nor safetensors
    pickle only   weights in a pickle format alone, which runs code as it loads
    no cards      safetensors alone (vLLM, SGLang), on a cluster without cards
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmgw.config import HubSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.layouts import FP8_CC, GB, Layout, ModelShape, plan
from llmgw.control.catalog.shapes import Described, active_share, checkpoint_shape, gguf_shape
from llmgw.engines import is_pickle
from llmgw.hub import Found, Hub, HubError, RepoInfo

EXPLORE_CONTEXT = 4096
# Of each repository's smallest GGUF: the keys that say its layers and attention come before its vocabulary, and
# a search reads twenty repositories at once (the plan of one model reads 16 MiB).
HEADER_READ = 256 << 10
_QUANT = re.compile(r"(IQ\d_[A-Z0-9_]+|Q\d_K(?:_[SML])?|Q\d_\d|Q\d_K|F16|BF16|F32|FP8|MXFP4)", re.IGNORECASE)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass(frozen=True)
class Choice:
    """One way a repository's weights come: a GGUF quantisation or its safetensors checkpoint."""

    name: str
    format: str
    size_gb: float
    runs: bool
    source: str = ""
    """What to give `ctl model plan` and `serve` for it: hf:org/repo/file.gguf, or hf:org/repo."""
    way: str = ""
    """The plan's best way here, in words."""
    cpu_tokens_per_s: float = 0.0
    gpu_tokens_per_s: float = 0.0


@dataclass(frozen=True)
class Candidate:
    repo: str
    commit: str
    publisher: str
    trusted: bool
    downloads: int
    scan: str
    """The worst of Hugging Face's verdicts on its files: safe, caution, suspicious, unsafe…"""
    choices: tuple[Choice, ...] = ()
    left_out: str = ""
    """Why nothing of it runs here (one of the module's reasons); "" when something does."""

    @property
    def runs(self) -> bool:
        return not self.left_out


@dataclass
class Explored:
    query: str
    candidates: list[Candidate] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)


_SCAN_ORDER = ("", "unscanned", "queued", "error", "safe", "caution", "suspicious", "unsafe")


async def explore(hub: Hub, settings: HubSettings, nodes: Sequence[NodeView], query: str,
                  limit: int = 20) -> Explored:
    found = await hub.search(query, limit)

    async def read(f: Found) -> RepoInfo | None:
        try:
            return await hub.repo(f.repo_id, f.commit or "main")
        except HubError:
            return None  # gone or closed between the search and the read: not listed

    infos = await asyncio.gather(*(read(f) for f in found))
    shapes = await asyncio.gather(*(read_shapes(hub, info) for info in infos if info is not None))
    shaped = iter(shapes)
    out = Explored(query)
    for f, info in zip(found, infos, strict=True):
        if info is None:
            continue
        candidate = judge(f, info, settings, nodes, *next(shaped))
        out.candidates.append(candidate)
        if candidate.left_out:
            out.left_out[candidate.left_out] = out.left_out.get(candidate.left_out, 0) + 1
    return out


async def read_shapes(hub: Hub, info: RepoInfo) -> tuple[ModelShape | None, ModelShape | None]:
    """What the repository's GGUF header (its smallest quantisation's, whose keys the others share) and its
    config.json say of its layers and attention, so that each choice's room for the context is judged as serving
    would judge it; (None, None) where they cannot be read, and sizes alone are judged by."""
    ggufs = _gguf_sets(info)

    async def one(reading: Awaitable[Described]) -> ModelShape | None:
        try:
            return (await reading).shape
        except (HubError, Refusal):
            return None
    gguf = one(gguf_shape(hub, info, min(ggufs, key=lambda n: ggufs[n]), HEADER_READ)) if ggufs else None
    checkpoint = (one(checkpoint_shape(hub, info))
                  if any(n.endswith(".safetensors") for n in info.files) and "config.json" in info.files else None)
    got = await asyncio.gather(*(r for r in (gguf, checkpoint) if r is not None))
    shapes = iter(got)
    return (next(shapes) if gguf is not None else None), (next(shapes) if checkpoint is not None else None)


def judge(found: Found, info: RepoInfo, settings: HubSettings, nodes: Sequence[NodeView],
          gguf: ModelShape | None = None, checkpoint: ModelShape | None = None) -> Candidate:
    publisher = found.repo_id.split("/", 1)[0]
    scans = [f.scan for f in info.files.values()]
    worst = max(scans, key=lambda s: _SCAN_ORDER.index(s) if s in _SCAN_ORDER else 0, default="")
    head = Candidate(repo=found.repo_id, commit=info.commit, publisher=publisher, trusted=settings.trusts(publisher),
                     downloads=found.downloads, scan=worst)
    if found.library == "mlx" or "mlx" in found.tags:
        return dataclasses.replace(head, left_out="mlx")
    ggufs = _gguf_sets(info)
    safetensors = [f for name, f in info.files.items() if name.endswith(".safetensors")]
    if not ggufs and not safetensors:
        pickled = any(is_pickle(name) for name in info.files)
        return dataclasses.replace(head, left_out="pickle only" if pickled else "no weights")
    choices = [_choice(name, "gguf", size, found.repo_id, nodes, gguf) for name, size in ggufs.items()]
    if safetensors:
        fp8 = "fp8" in found.repo_id.lower() or (checkpoint is not None and checkpoint.fp8)
        choices.append(_choice("safetensors", "fp8" if fp8 else "safetensors", sum(f.size for f in safetensors),
                               found.repo_id, nodes, checkpoint))
    runnable = tuple(c for c in choices if c.runs)
    if runnable:
        return dataclasses.replace(head, choices=tuple(choices))
    if all(c.format == "fp8" for c in choices) and not any(g.cc >= FP8_CC for n in nodes for g in n.gpus):
        return dataclasses.replace(head, choices=tuple(choices), left_out="fp8")
    if not ggufs and not any(n.gpus for n in nodes):
        return dataclasses.replace(head, choices=tuple(choices), left_out="no cards")
    return dataclasses.replace(head, choices=tuple(choices), left_out="too big")


def _gguf_sets(info: RepoInfo) -> dict[str, int]:
    """Each GGUF quantisation's file (a split one by its first part) and its whole size; mmproj left out."""
    sets: dict[str, int] = {}
    for name, f in sorted(info.files.items()):
        lowered = name.lower()
        if not lowered.endswith(".gguf") or "mmproj" in lowered:
            continue
        split = _SPLIT.search(name)
        key = f"{name[:split.start()]}-00001-of-{split.group(2)}.gguf" if split else name
        sets[key] = sets.get(key, 0) + f.size
    return sets


def _choice(name: str, fmt: str, size: int, repo: str, nodes: Sequence[NodeView],
            read: ModelShape | None = None) -> Choice:
    if read is not None:
        # The header's layers and attention; this choice's own size (a quantisation of the same model).
        shape = dataclasses.replace(read, weights_bytes=size, fp8=fmt == "fp8")
    else:
        shape = ModelShape(weights_bytes=size, format="gguf" if fmt == "gguf" else "safetensors", fp8=fmt == "fp8",
                           active_share=active_share(f"{repo}/{name}", 0, 0))
    ways = [w for w in plan(shape, nodes, EXPLORE_CONTEXT) if w.offered]
    label = _quant(name) if fmt == "gguf" else fmt
    source = f"hf:{repo}/{name}" if fmt == "gguf" else f"hf:{repo}"
    if not ways:
        return Choice(label, fmt, round(size / GB, 1), False, source)
    best = ways[0]
    cpu = max((w.tokens_per_s for w in ways if w.kind == "cpu"), default=0.0)
    gpu = max((w.tokens_per_s for w in ways if w.kind not in ("cpu", "cpu offload")), default=0.0)
    return Choice(label, fmt, round(size / GB, 1), True, source, _words(best), cpu, gpu)


def _quant(name: str) -> str:
    found = _QUANT.search(name.rsplit("/", 1)[-1])
    return found.group(1).upper() if found else name.rsplit("/", 1)[-1]


def _words(way: Layout) -> str:
    if way.kind in ("cpu", "cpu offload"):
        return f"{way.kind} on {way.nodes[0]}" + (f" and {len(way.nodes) - 1} more" if len(way.nodes) > 1 else "")
    return f"{way.cards} × {way.card_class}, {way.engine}"


def view(explored: Explored, nodes: Sequence[NodeView]) -> dict[str, Any]:
    """What the admin API answers: every candidate, and what was judged by."""
    return {
        "query": explored.query,
        "judged_by": {"nodes": len(nodes), "cards": sum(len(n.gpus) for n in nodes),
                      "context": EXPLORE_CONTEXT,
                      "rules": "each format through the plan (llmgw ctl model plan) by its size; left out: too big "
                               "for any node, FP8 without a card of 8.9, MLX, neither GGUF nor safetensors, "
                               "pickle only, safetensors alone without cards"},
        "candidates": [dataclasses.asdict(c) | {"runs": c.runs} for c in explored.candidates],
        "left_out": explored.left_out,
    }
