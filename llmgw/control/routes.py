"""Where a control plane's routers learn the catalog's ready replicas, whoever leads.

Three sources, one picture (`Routes`: each catalog model with its ready
replicas, and the notes that say why one waits or where it loads):

- the leader's reconciler, every pass;
- the store, once at start: a control plane that starts (a restarted
  leader, a standby) routes to the replicas the store lists as ready, after
  a probe, before any agent has reconnected, and knows every catalog model
  so that none is answered "not here" (issue 9: a restarted leader answered
  404 for 10.8 s while both replicas ran);
- with `router.active_active`, the leader's answer to a standby's exchange
  (control/exchange.py), every 2 s.

Whatever the source, the picture goes to `RouteSink`: the in-process
router's registry, or every worker process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import aiohttp

from llmgw.config import CAPABILITIES, Capability, ComfyUIModel, ModelSettings, from_dict, to_dict
from llmgw.control.catalog import Entry, ModelSpec
from llmgw.control.tokenizers import hub_folder
from llmgw.protocol import CachedBlocks
from llmgw.router import Placed
from llmgw.store import CatalogStore, Replica

log = logging.getLogger("llmgw.routes")

PROBE_TIMEOUT = 1.0  # seconds a replica has to answer before a start goes on without it


@dataclass
class Routes:
    placed: dict[str, Placed] = field(default_factory=dict)
    waits: dict[str, str] = field(default_factory=dict)  # catalog model -> why placement waits
    loading: dict[str, str] = field(default_factory=dict)  # catalog model -> where a replica loads


class RouteSink(Protocol):
    def set_placed(self, placed: dict[str, Placed]) -> None: ...

    def set_notes(self, waits: dict[str, str], loading: dict[str, str]) -> None: ...

    def cached_blocks(self, message: CachedBlocks) -> None: ...


def _is_capability(name: str) -> TypeGuard[Capability]:
    # The catalog's and the main process's lists hold only these (config/capabilities.py orders and
    # filters them); the check is what lets a str stand where a model's settings want a Capability.
    return name in CAPABILITIES


def placed_models(entries: Iterable[Entry], replicas: Iterable[Replica], key: str | None,
                  tokenizers: Path | None = None) -> dict[str, Placed]:
    """Every catalog model (aliases too) with the replicas among `replicas` that can take requests; `tokenizers`
    is where this control plane keeps the Hugging Face models' tokenizers (control/tokenizers.py)."""
    ready: dict[str, list[tuple[str, str]]] = {}
    profiles: dict[str, int] = {}
    for r in replicas:
        if r.state == "ready" and r.url and r.desired == "run":
            ready.setdefault(r.model, []).append((r.id, r.url))
            profiles[r.id] = r.profile
    placed: dict[str, Placed] = {}
    for entry in entries:
        if entry.removed:
            continue
        spec = entry.spec
        found = tuple(sorted(ready.get(spec.name, [])))
        engines = tuple((shard, spec.profiles[profiles[shard]].engine) for shard, _ in found
                        if profiles[shard] < len(spec.profiles))
        for name in (spec.name, *spec.aliases):
            settings = ModelSettings(name=name, context_length=spec.context_length, max_output_tokens=spec.max_output,
                                     capabilities=[c for c in spec.can() if _is_capability(c)],
                                     comfyui=comfyui_of(spec))
            placed[name] = Placed(settings, found, key, upstream=spec.name, on_demand=entry.on_demand,
                                  stopped=entry.stopped, engines=engines, tokenizer=tokenizer_of(spec, tokenizers))
    return placed


def comfyui_of(spec: ModelSpec) -> ComfyUIModel | None:
    """A ComfyUI model's workflow as its router runs it: the checkpoint named, from its source when not given."""
    media = spec.comfyui
    if media is None or media.checkpoint:
        return media
    return dataclasses.replace(media, checkpoint=spec.source.rstrip("/").rpartition("/")[2].partition("@")[0])


def tokenizer_of(spec: ModelSpec, tokenizers: Path | None = None) -> str:
    """Where the router reads the model's tokenizer: its `tokenizer`; else, for a model from Hugging Face, the
    copy this control plane keeps of it; else its source when that is a folder path (on a machine that is both
    control plane and node, the weights themselves); "" for none."""
    if spec.tokenizer:
        return spec.tokenizer
    kept = hub_folder(tokenizers, spec) if tokenizers is not None else None
    if kept is not None:
        return str(kept)
    return spec.source if spec.source.startswith("/") and not spec.source.endswith(".gguf") else ""


async def from_store(store: CatalogStore, key: str | None, tokenizers: Path | None = None) -> dict[str, Placed]:
    """The catalog and its ready replicas as the store has them (what the last leader wrote)."""
    entries = []
    for record in await store.list_models():
        try:
            entries.append(Entry.from_record(record))
        except Exception as e:  # noqa: BLE001 - one bad row must not hide the others
            log.error("the catalog's model %s cannot be read: %s", record.name, e)
    return placed_models(entries, await store.list_replicas(), key, tokenizers)


async def probed(placed: dict[str, Placed], timeout: float = PROBE_TIMEOUT) -> dict[str, Placed]:
    """`placed` less the replicas that do not answer now (a node that went with the old leader).

    One GET /v1/models a replica, all at once, within `timeout`; any answer
    counts (an engine that says 401 or 404 is up). What is left out is
    added back by the reconciler once its agent reports it ready.
    """
    urls = {url for p in placed.values() for _, url in p.replicas}
    if not urls:
        return placed
    key = next((p.api_key for p in placed.values() if p.api_key), None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    alive: set[str] = set()

    async def probe(session: aiohttp.ClientSession, url: str) -> None:
        try:
            async with session.get(url.rstrip("/") + "/v1/models", headers=headers) as r:
                await r.read()
                if r.status < 500:
                    alive.add(url)
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        await asyncio.gather(*(probe(session, url) for url in urls))
    gone = urls - alive
    if gone:
        log.info("%d replica(s) the store lists as ready did not answer and wait for their agents: %s",
                 len(gone), ", ".join(sorted(gone)))
    return {name: Placed(p.settings, tuple(r for r in p.replicas if r[1] in alive), p.api_key, p.upstream,
                         p.on_demand, p.stopped, p.engines)
            for name, p in placed.items()}


# Across a process (workers) or a machine (the standbys' exchange) as JSON. The key the engines
# take never travels between machines: every control plane derives it from the master key.

def to_doc(routes: Routes) -> dict[str, Any]:
    return {
        "placed": {name: {"context_length": p.settings.context_length,
                          "max_output_tokens": p.settings.max_output_tokens,
                          "capabilities": list(p.settings.capabilities),
                          "replicas": [list(r) for r in p.replicas], "upstream": p.upstream,
                          "on_demand": p.on_demand, "stopped": p.stopped,
                          "engines": [list(e) for e in p.engines], "tokenizer": p.tokenizer,
                          **({"comfyui": to_dict(p.settings.comfyui)} if p.settings.comfyui is not None else {})}
                   for name, p in routes.placed.items()},
        "waits": dict(routes.waits), "loading": dict(routes.loading),
    }


def from_doc(doc: dict[str, Any], key: str | None) -> Routes:
    placed = {}
    for name, p in (doc.get("placed") or {}).items():
        settings = ModelSettings(name=name, context_length=int(p.get("context_length") or 0),
                                 max_output_tokens=int(p.get("max_output_tokens") or 0),
                                 capabilities=[c for c in map(str, p.get("capabilities") or []) if _is_capability(c)],
                                 comfyui=from_dict(ComfyUIModel, p["comfyui"]) if p.get("comfyui") else None)
        replicas = tuple((str(shard), str(url)) for shard, url in p.get("replicas") or [])
        engines = tuple((str(shard), str(engine)) for shard, engine in p.get("engines") or [])
        placed[name] = Placed(settings, replicas, key, str(p.get("upstream") or ""), bool(p.get("on_demand")),
                              bool(p.get("stopped")), engines, str(p.get("tokenizer") or ""))
    return Routes(placed, dict(doc.get("waits") or {}), dict(doc.get("loading") or {}))


class RouteBoard:
    """The picture in force on this control plane, handed to its routers; the last one kept for the exchange."""

    def __init__(self, sink: RouteSink) -> None:
        self.sink = sink
        self.current = Routes()
        self.blocks_held: dict[str, int] = {}  # shard id -> blocks its engine holds, as its agent last said

    # The reconciler's sink is this board, so what it publishes is kept too.
    def set_placed(self, placed: dict[str, Placed]) -> None:
        self.current = Routes(dict(placed), self.current.waits, self.current.loading)
        self.sink.set_placed(placed)

    def set_notes(self, waits: dict[str, str], loading: dict[str, str]) -> None:
        self.current = Routes(self.current.placed, dict(waits), dict(loading))
        self.sink.set_notes(waits, loading)

    def cached_blocks(self, message: CachedBlocks) -> None:
        """What a replica's engine cached and evicted, from its agent: to the routers. Only how many blocks each
        holds is kept here, for `ctl replicas` (a new leader gets every replica's whole from its agents)."""
        held = 0 if message.cleared else self.blocks_held.get(message.shard_id, 0)
        self.blocks_held[message.shard_id] = max(0, held + len(message.added) - len(message.removed))
        self.sink.cached_blocks(message)

    def publish(self, routes: Routes) -> None:
        self.set_placed(routes.placed)
        self.set_notes(routes.waits, routes.loading)
