"""The catalog over the store: what the admin API's model, node and replica routes call.

Every change is read, changed (changes.py) and written back on the
version it was read at, retried when another administrator's change
landed in between, and recorded in the audit log with the spec before
and after — engine environment values left out, since a token is often
passed that way. The reconciler on the leader sees the new version and
carries the change out; nothing here talks to an agent.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from llmgw.account import Actor
from llmgw.config import HubSettings, capabilities
from llmgw.control.catalog import changes, explorer, layouts
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.cluster import NodeView
from llmgw.control.catalog.explain import explain
from llmgw.control.catalog.explain import view as explain_view
from llmgw.control.catalog.fit import Room
from llmgw.control.catalog.pinning import Pinner
from llmgw.control.catalog.placement import DEFAULT_POLICY, GONE, Demand, Entry, Policy, node_lost
from llmgw.control.catalog.shapes import describe_source
from llmgw.control.catalog.spec import ModelSpec, SpecError, load_spec
from llmgw.errors import N_
from llmgw.hub import Hub, HubError, parse_source
from llmgw.protocol import GPUSensor, ProtocolError, from_dict
from llmgw.store import CatalogModel, CatalogStore, Conflict, NodeRecord, Replica

if TYPE_CHECKING:
    from typing import Unpack

    from llmgw.control.catalog.changes import ServeChoices

Audit = Callable[[Actor, str, str, Any, Any], Awaitable[None]]
TRIES = 3
# The context a plan is made for when none is asked and the model says none shorter.
DEFAULT_PLAN_CONTEXT = 8192
# A change to a model's spec, given the nodes and the replicas: the new spec and what to tell about it.
_Change = Callable[[ModelSpec, list[NodeView], list[Replica]], tuple[ModelSpec, list[str]]]


def redacted(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """A spec document fit for the audit log and for showing: engine environment values hidden."""
    if doc is None:
        return None
    out = dict(doc)
    out["profiles"] = [
        {**p, "env": {k: "…" for k in p["env"]}} if isinstance(p, dict) and p.get("env") else p
        for p in doc.get("profiles") or []
    ]
    return out


def card_use(heartbeat: dict[str, Any], index: int, *, mig: bool) -> dict[str, Any]:
    """A card's work from its node's last heartbeat (as stored); None where it is not known.

    No driver measures the utilisation of a MIG instance, and SM activity
    only comes from GPM or a dcgm-exporter: a 0 there would say idle.
    """
    out: dict[str, Any] = {"used_mb": None, "utilization_percent": None, "sm_active_percent": None}
    for doc in heartbeat.get("gpus") or []:
        if not isinstance(doc, dict) or doc.get("index") != index:
            continue
        try:
            s = from_dict(GPUSensor, doc, "heartbeat.gpus")
        except ProtocolError:
            return out
        out["used_mb"] = s.memory_used_mb
        if not mig:
            out["utilization_percent"] = s.utilization_percent
            if s.has_profile and s.sm_active_percent >= 0:
                out["sm_active_percent"] = s.sm_active_percent
    return out


class Catalog:
    def __init__(self, store: CatalogStore, audit: Audit, *, policy: Policy = DEFAULT_POLICY,
                 clock: Callable[[], float] = time.time, hub: Callable[[], HubSettings] | None = None,
                 pinner: Pinner | None = None, hub_client: Callable[[HubSettings], Hub] | None = None) -> None:
        self.store = store
        self.audit = audit
        self.policy = policy
        self.clock = clock
        # A control plane pins what is added from Hugging Face (pinning.py); without hub settings (a test of the
        # catalog alone) sources are kept as written.
        self.pinner = pinner or (Pinner(hub, hub_client, clock=clock) if hub is not None else None)

    # --- reading ---------------------------------------------------------------------------------

    async def _record(self, name: str) -> CatalogModel:
        record = await self.store.get_model(name)
        if record is not None and record.removed_at is None:
            return record
        models = await self.store.list_models()
        for m in models:
            if name in (m.spec.get("aliases") or []):
                return m
        said = ", ".join(m.name for m in models) or "none yet"
        raise Refusal(N_('the catalog has no model named {name} (the models: {said})'),
                      404, "not_found", params={"name": name, "said": said})

    async def _cluster(self) -> tuple[list[NodeView], list[Replica], dict[str, NodeRecord]]:
        records = await self.store.list_nodes()
        views = []
        for r in records:
            try:
                views.append(NodeView.from_record(r))
            except ProtocolError:
                continue  # a record from a newer agent this control plane cannot read
        return views, await self.store.list_replicas(), {r.id: r for r in records}

    async def _entries(self, include_removed: bool = True) -> list[Entry]:
        out = []
        for record in await self.store.list_models(include_removed=include_removed):
            try:
                out.append(Entry.from_record(record))
            except SpecError:
                continue
        return out

    def _spec(self, record: CatalogModel) -> ModelSpec:
        try:
            return load_spec(record.spec, f"the catalog's model {record.name}")
        except SpecError as e:
            raise Refusal(N_('{e}; fix it with llmgw ctl model add -f FILE after removing it'),
                          500, "bad_spec", params={"e": e}) from None

    def model_view(self, record: CatalogModel, replicas: list[Replica]) -> dict[str, Any]:
        spec = record.spec
        mine = [r for r in replicas if r.model == record.name and r.state not in GONE and r.desired == "run"]
        ready = sum(1 for r in mine if r.state == "ready")
        parked = [r for r in replicas if r.model == record.name and r.state == "parked" and r.desired == "run"]
        scaling = spec.get("scaling") or {}
        lo = int(scaling.get("min", 1))
        on_demand = scaling.get("on_demand") is not None
        if record.removed_at is not None:
            state = "removing"
        elif record.stopped:
            state = "stopped"
        elif ready and ready >= lo:
            state = "ready"
        elif mine:
            state = "starting"
        elif parked:
            state = "parked"
        elif on_demand and lo == 0:
            state = "on demand"
        else:
            state = "waiting"
        engines = [p.get("engine") for p in spec.get("profiles") or [] if isinstance(p, dict)]
        # A profile naming no engine limits nothing, as an engine for_catalog does not know does not.
        return {
            "name": record.name, "aliases": spec.get("aliases") or [], "state": state, "engines": engines,
            "capabilities": list(capabilities.for_catalog(spec.get("capabilities") or [],
                                                          [e for e in engines if isinstance(e, str)],
                                                          spec.get("role") or "", _output(spec))),
            "source": spec.get("source", ""), "context_length": spec.get("context_length", 0),
            "max_output": spec.get("max_output", 0), "slots": spec.get("slots", 0),
            "scaling": {"min": lo, "max": int(scaling.get("max", 0)) or lo, "on_demand": on_demand},
            "replicas": {"ready": ready, "running": len(mine)}, "version": record.version,
            "parked": parked[0].message if parked else "",
            "updated_at": record.updated_at, "updated_by": record.updated_by,
            "spec": redacted(spec),
        }

    async def list_models(self) -> list[dict[str, Any]]:
        replicas = await self.store.list_replicas()
        return [self.model_view(m, replicas) for m in await self.store.list_models(include_removed=True)]

    async def show(self, name: str) -> dict[str, Any]:
        record = await self._record(name)
        replicas = await self.store.list_replicas(model=record.name)
        doc = self.model_view(record, replicas)
        _, _, nodes = await self._cluster()
        doc["replica_list"] = [self.replica_view(r, nodes) for r in replicas]
        return doc

    # --- changing --------------------------------------------------------------------------------

    async def add(self, actor: Actor, doc: Any, action: str = "model.add", *, trust: bool = False) -> dict[str, Any]:
        """Add a model from its document; `trust` is an administrator's word for a publisher not on
        hub.trusted_publishers."""
        try:
            spec = load_spec(doc)
        except SpecError as e:
            raise Refusal(e.template, 400, "invalid_model", params=e.params or None) from None
        return await self._add(actor, spec, [], action, trust)

    async def serve(self, actor: Actor, source: str, *, trust: bool = False, layout: int | None = None,
                    **choices: Unpack[ServeChoices]) -> dict[str, Any]:
        """Add a model made from a source and a few choices; `layout` takes the plan's way of that number
        (`llmgw ctl model plan` lists them, offered ones from 1) for the engine, the cards and the memory."""
        chosen: list[str] = []
        if layout is not None:
            choices, said = await self._layout_choices(source, layout, choices)
            chosen.append(said)
        spec, notes = changes.serve_spec(source, **choices)
        return await self._add(actor, spec, [*chosen, *notes], "model.serve", trust)

    async def explore(self, query: str, limit: int = 20) -> dict[str, Any]:
        """What the hub's search finds for `query`, each judged by what this cluster's nodes can run
        (explorer.py), for `llmgw ctl model search` and the models page."""
        if self.pinner is None:
            raise Refusal(N_("this catalog has no hub to read models from"), 409, "no_hub")
        if not query.strip() or not 1 <= limit <= 100:
            raise Refusal(N_("give words to search for, and a limit from 1 to 100"), 400, "invalid_request")
        settings = self.pinner.settings()
        now = self.clock()
        views, _, _ = await self._cluster()
        nodes = [v for v in views if node_lost(v, now, self.policy) is None]
        try:
            found = await explorer.explore(self.pinner.hub(settings), settings, nodes, query.strip(), limit)
        except HubError as e:
            raise Refusal(N_("{reason}"), e.status, "hub", params={"reason": str(e)}) from None
        return explorer.view(found, nodes)

    async def _layout_choices(self, source: str, layout: int, choices: ServeChoices) -> tuple[ServeChoices, str]:
        planned = await self.plan(source, choices.get("context") or 0)
        offered = [w for w in planned["layouts"] if w["offered"]]
        if not 1 <= layout <= len(offered):
            raise Refusal(N_("--layout {layout}: the plan offers {count} way(s) for {source} here; llmgw ctl model "
                             "plan {source} lists them"), 400, "invalid_request",
                          params={"layout": layout, "count": len(offered), "source": source})
        way = offered[layout - 1]
        if choices.get("engine") and choices.get("engine") != way["engine"]:
            raise Refusal(N_("--layout {layout} runs on {engine}; give that engine, or leave --engine out"), 400,
                          "invalid_request", params={"layout": layout, "engine": way["engine"]})
        if way["kind"] == "cpu offload" and not way["layers_on_card"]:
            raise Refusal(N_("--layout {layout} puts part of the model on a card, and its layers are not known to "
                             "say how many; serve it on the CPU or on cards"), 400, "invalid_request",
                          params={"layout": layout})
        picked: ServeChoices = {**choices, "engine": way["engine"], "context": planned["context"]}
        if way["kind"] in ("cpu", "cpu offload"):
            picked["memory"] = choices.get("memory") or f"{math.ceil(way['memory_gb'])}GB"
            picked["gpus"] = 1 if way["kind"] == "cpu offload" else None
            if way["kind"] == "cpu offload":
                picked["args"] = ["-ngl", str(way["layers_on_card"])]
        else:
            picked["gpus"] = way["cards"]
        where = f"{way['cards']} × {way['card_class']}" if way["cards"] else "the CPU"
        return picked, f"the plan's way {layout}: {way['kind']} on {where}, {way['engine']}, at {planned['context']} " \
                       "tokens of context"

    async def _add(self, actor: Actor, spec: ModelSpec, notes: list[str], action: str,
                   trust: bool = False) -> dict[str, Any]:
        changes.check_engines(spec)
        names = {spec.name, *spec.aliases}
        for other in await self.store.list_models(include_removed=True):
            theirs = {other.name, *(other.spec.get("aliases") or [])}
            if other.name == spec.name and other.removed_at is not None:
                raise Refusal(N_('{name} is being removed and its replicas are stopping; add it again once llmgw ctl '
                                 'models no longer lists it'), 409, "conflict", params={"name": spec.name})
            taken = names & theirs
            if taken:
                word = sorted(taken)[0]
                raise Refusal(N_('{word} is already {which} of {name} in the catalog'),
                              409, "conflict",
                              params={"word": word, "which": 'the name' if word == other.name else 'an alias',
                                      "name": other.name})
        if self.pinner is not None:
            spec, pinned = await self.pinner.pin(spec, actor, trust)
            notes = [*notes, *pinned]
        now = self.clock()
        record = CatalogModel(spec.name, spec.to_doc(), stopped=spec.stopped, created_at=now, updated_at=now,
                              updated_by=actor.name)
        try:
            saved = await self.store.add_model(record)
        except Conflict as e:
            raise Refusal(N_("{conflict}"), 409, "conflict", params={"conflict": str(e)}) from None
        await self.audit(actor, action, f"model:{spec.name}", None, redacted(saved.spec))
        return {"model": self.model_view(saved, []), "notes": notes}

    async def _change(self, actor: Actor, name: str, action: str,
                      change: _Change) -> dict[str, Any]:
        for attempt in range(TRIES):
            record = await self._record(name)
            nodes, replicas, _ = await self._cluster()
            spec = self._spec(record)
            new, notes = change(spec, nodes, replicas)
            changes.check_engines(new)
            doc = new.to_doc()
            after = dataclasses.replace(record, spec=doc, stopped=new.stopped, updated_at=self.clock(),
                                        updated_by=actor.name)
            if doc == record.spec and after.stopped == record.stopped:
                return {"model": self.model_view(record, replicas), "notes": notes or ["no change"]}
            try:
                saved = await self.store.put_model(after, record.version)
            except Conflict:
                if attempt == TRIES - 1:
                    raise Refusal(N_('{name} kept being changed by someone else; try again'),
                                  409, "conflict", params={"name": name}) from None
                continue
            await self.audit(actor, action, f"model:{record.name}", redacted(record.spec), redacted(saved.spec))
            return {"model": self.model_view(saved, replicas), "notes": notes}
        raise AssertionError("unreachable")

    async def update(self, actor: Actor, name: str, apply: bool = False) -> dict[str, Any]:
        """What changed upstream since the model was pinned: its revision's commit now and the files that differ;
        with `apply`, the model moved to that commit (its replicas replaced as for any change to the weights)."""
        record = await self._record(name)
        spec = self._spec(record)
        origin = spec.origin
        if self.pinner is None or origin is None or not origin.commit:
            raise Refusal(N_("{name} was not pinned from Hugging Face (its source is not hf:, or it was added before "
                             "models were pinned): there is nothing to compare upstream; add it again to pin it"),
                          409, "not_pinned", params={"name": record.name})
        following = dataclasses.replace(spec, source=parse_source(spec.source).at(origin.revision))
        upstream, _ = await self.pinner.pin(following, actor, trust=origin.trusted == "administrator",
                                            compare_given=False)
        now = upstream.origin or origin
        changed = [{"name": n, "was": origin.files[n].sha256 if n in origin.files else "", "now": f.sha256,
                    "size": f.size}
                   for n, f in sorted(now.files.items())
                   if n not in origin.files or (origin.files[n].sha256, origin.files[n].size) != (f.sha256, f.size)]
        out: dict[str, Any] = {"name": record.name, "repo": origin.repo, "revision": origin.revision,
                               "commit": origin.commit, "upstream": now.commit, "files": changed, "applied": False}
        if not apply or now.commit == origin.commit:
            return out

        def move(current: ModelSpec, nodes: list[NodeView], replicas: list[Replica]) -> tuple[ModelSpec, list[str]]:
            if current.origin is None or current.origin.commit != origin.commit:
                raise Refusal(N_("{name} was moved by someone else meanwhile; look again with llmgw ctl model update "
                                 "{name}"), 409, "conflict", params={"name": record.name})
            return dataclasses.replace(current, source=upstream.source, sha256=upstream.sha256, files=upstream.files,
                                       origin=now), [
                f"moved from commit {origin.commit[:12]} to {now.commit[:12]} of {origin.repo}; its replicas are "
                "replaced as the nodes fetch the new files"]
        result = await self._change(actor, record.name, "model.update", move)
        return {**out, "applied": True, "model": result["model"], "notes": result["notes"]}

    async def plan(self, source: str, context: int = 0) -> dict[str, Any]:
        """The ways this cluster's nodes, as they are now, could run the model at `source` (on the hub in
        hub.endpoint), before anything is fetched: layouts.py's judgement, for `llmgw ctl model plan`."""
        if self.pinner is None:
            raise Refusal(N_("this catalog has no hub to read models from"), 409, "no_hub")
        if context < 0:
            raise Refusal(N_("context must be 0 or more, got {value}"), 400, "invalid_request",
                          params={"value": context})
        described = await describe_source(self.pinner.hub(self.pinner.settings()), source)
        shape = described.shape
        planned = context or min(shape.trained_context or DEFAULT_PLAN_CONTEXT, DEFAULT_PLAN_CONTEXT)
        now = self.clock()
        views, _, _ = await self._cluster()
        nodes = [v for v in views if node_lost(v, now, self.policy) is None]
        ways = layouts.plan(shape, nodes, planned)
        return {
            "source": source, "repo": described.repo, "commit": described.commit, "files": list(described.files),
            "context": planned, "shape": dataclasses.asdict(shape) | {"engine": shape.engine},
            "judged_by": {"nodes": len(nodes), "cards": sum(len(v.gpus) for v in nodes),
                          "left_out": len(views) - len(nodes)},
            "layouts": [dataclasses.asdict(w) | {"need_gb": w.need_gb} for w in ways],
        }

    async def stop(self, actor: Actor, name: str) -> dict[str, Any]:
        def change(spec: ModelSpec, nodes: list[NodeView], replicas: list[Replica]) -> tuple[ModelSpec, list[str]]:
            if spec.stopped:
                return spec, [f"{spec.name} was already stopped"]
            return dataclasses.replace(spec, stopped=True), [
                "its replicas stop; it stays in the catalog with its files and scaling (llmgw ctl model start)"]
        return await self._change(actor, name, "model.stop", change)

    async def start(self, actor: Actor, name: str) -> dict[str, Any]:
        def change(spec: ModelSpec, nodes: list[NodeView], replicas: list[Replica]) -> tuple[ModelSpec, list[str]]:
            if not spec.stopped:
                return spec, [f"{spec.name} was not stopped"]
            return dataclasses.replace(spec, stopped=False), ["it runs again, scaled as it was"]
        return await self._change(actor, name, "model.start", change)

    async def scale(self, actor: Actor, name: str, min_: int | None, max_: int | None) -> dict[str, Any]:
        return await self._change(actor, name, "model.scale", lambda s, n, r: changes.scale(s, min_, max_))

    async def resources(self, actor: Actor, name: str, cores: int | None, memory: str | None,
                        profile: str | None = None) -> dict[str, Any]:
        return await self._change(actor, name, "model.resources",
                                  lambda s, n, r: changes.resources(s, cores, memory, profile, n))

    async def context(self, actor: Actor, name: str, tokens: int | None, slots: int | None = None,
                      max_output: int | None = None) -> dict[str, Any]:
        return await self._change(actor, name, "model.context",
                                  lambda s, n, r: changes.context(s, tokens, slots, max_output, n))

    async def gpus(self, actor: Actor, name: str, count: int, profile: str | None = None,
                   in_place: bool = False) -> dict[str, Any]:
        return await self._change(actor, name, "model.gpus",
                                  lambda s, n, r: changes.gpus(s, count, profile, in_place, n, r))

    async def restart(self, actor: Actor, name: str) -> dict[str, Any]:
        """Start every replica of a model again, one at a time, without it ceasing to answer.

        Raising `restarts` changes the profile hash placement compares each
        replica with (spec.profile_hash), so every replica started before is
        out of date and replaced the way a changed profile is: the new one
        beside the old, the old stopped once the new is ready, one at a time.
        """
        for attempt in range(TRIES):
            record = await self._record(name)
            spec = self._spec(record)
            if record.stopped or spec.stopped:
                raise Refusal(N_('{name} is stopped: it has no replica to restart (llmgw ctl model start {name} runs '
                                 'it again)'), 409, "stopped", params={"name": record.name})
            replicas = await self.store.list_replicas(model=record.name)
            # A parked replica counts: restarting is how its weights are tried again.
            running = [r for r in replicas if (r.state not in GONE or r.state == "parked") and r.desired == "run"]
            if not running:
                return {"model": self.model_view(record, replicas), "replicas": 0,
                        "notes": [f"none of {record.name}'s replicas runs now: nothing to restart (the next one "
                                  "placed starts afresh)"]}
            after = dataclasses.replace(record, restarts=record.restarts + 1, updated_at=self.clock(),
                                        updated_by=actor.name)
            try:
                saved = await self.store.put_model(after, record.version)
            except Conflict:
                if attempt == TRIES - 1:
                    raise Refusal(N_('{name} kept being changed by someone else; try again'),
                                  409, "conflict", params={"name": name}) from None
                continue
            await self.audit(actor, "model.restart", f"model:{record.name}", {"restarts": record.restarts},
                             {"restarts": saved.restarts})
            parked = [r for r in running if r.state == "parked"]
            notes = _restart_notes(spec, len(running) - len(parked)) if len(parked) < len(running) else []
            if parked:
                which = "its parked replica is" if len(parked) == 1 else f"its {len(parked)} parked replicas are"
                notes.insert(0, f"{which} given up and a new one fetches the weights again, carrying on from what "
                                f"arrived (llmgw ctl replicas --model {spec.name} shows how far it has got)")
            return {"model": self.model_view(saved, replicas), "replicas": len(running), "notes": notes}
        raise AssertionError("unreachable")

    async def remove(self, actor: Actor, name: str, purge: bool = False) -> dict[str, Any]:
        record = await self._record(name)
        replicas = [r for r in await self.store.list_replicas(model=record.name) if r.state not in GONE]
        now = self.clock()
        if not replicas and not purge:
            # Nothing runs and nothing is to be deleted on the nodes: gone now.
            await self.store.delete_model(record.name)
            notes = ["removed; its files stay on the nodes (llmgw ctl model remove --purge deletes them)"]
        else:
            after = dataclasses.replace(record, removed_at=now, purge=purge, updated_at=now, updated_by=actor.name)
            try:
                await self.store.put_model(after, record.version)
            except Conflict:
                raise Refusal(N_("{name} was changed by someone else meanwhile; look again and retry"), 409,
                              "conflict", params={"name": name}) from None
            notes = [f"its {len(replicas)} replica{'s' if len(replicas) != 1 else ''} stop, then it leaves the "
                     "catalog" if replicas else "it leaves the catalog"]
            notes.append("its files are deleted from the nodes once its replicas have stopped; adding it again "
                         "fetches them again" if purge else "its files stay on the nodes")
        await self.audit(actor, "model.remove", f"model:{record.name}", redacted(record.spec),
                         {"purge": purge})
        return {"model": record.name, "purge": purge, "notes": notes}

    # --- nodes and replicas ----------------------------------------------------------------------

    def replica_view(self, r: Replica, nodes: dict[str, NodeRecord]) -> dict[str, Any]:
        node = nodes.get(r.node_id)
        return {
            "id": r.id, "model": r.model, "node_id": r.node_id, "node": node.name if node else r.node_id,
            "state": r.state, "desired": r.desired, "url": r.url, "since": r.since, "message": r.message,
            "profile": r.profile, "cpu_cores": r.cpu_cores, "memory_mb": r.memory_mb, "gpus": r.gpus,
            "gpu_memory_mb": r.gpu_memory_mb, "replaces": r.replaces, "fetch": (r.detail or {}).get("fetch"),
        }

    async def replicas(self, model: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
        _, _, nodes = await self._cluster()
        node_id = None
        if node is not None:
            node_id = self._node_id(node, nodes)
        found = await self.store.list_replicas(model=model, node_id=node_id)
        return [self.replica_view(r, nodes) for r in found]

    def _node_id(self, ident: str, nodes: dict[str, NodeRecord]) -> str:
        if ident in nodes:
            return ident
        named = [n.id for n in nodes.values() if n.name == ident]
        if len(named) == 1:
            return named[0]
        if named:
            raise Refusal(N_("{count} nodes are named {ident}; give its id ({ids})"), 409,
                          "ambiguous", params={"count": len(named), "ident": ident, "ids": ', '.join(named)})
        said = ", ".join(sorted(n.name for n in nodes.values())) or "none yet"
        raise Refusal(N_('there is no node {ident} (the nodes: {said})'),
                      404, "not_found", params={"ident": ident, "said": said})

    def node_view(self, record: NodeRecord, view: NodeView | None, replicas: list[Replica]) -> dict[str, Any]:
        now = self.clock()
        mine = [r for r in replicas if r.node_id == record.id and r.state not in GONE]
        doc: dict[str, Any] = {"id": record.id, "name": record.name, "labels": {}, "engines": {}, "cores": 0,
                               "memory_mb": 0, "gpus": [], "replicas": len(mine),
                               "heartbeat_at": record.heartbeat_at,
                               "seen_ago_s": (None if record.heartbeat_at is None
                                              else round(now - record.heartbeat_at, 1)),
                               "first_seen": record.first_seen, "recorded_state": record.state}
        if view is None:
            doc["state"] = "unreadable"
            return doc
        lost = node_lost(view, now, self.policy)
        room = Room(view)
        for r in mine:
            room.hold(r)
        host = record.register.get("host") or {}
        beat = record.heartbeat or {}
        # A lost node's last readings are not how its cards are now: none rather than old ones.
        readings = {} if lost else beat
        migs = {g.get("index") for g in record.register.get("gpus") or [] if isinstance(g, dict) and g.get("mig")}
        doc.update({
            "state": "lost" if lost else "ready", "lost": lost, "labels": view.labels,
            "engines": record.register.get("engines") or {}, "cores": view.cores, "memory_mb": view.memory_mb,
            "free": {"cores": room.cores, "memory_mb": room.memory},
            "gpus": [{"index": g.index, "class": g.cls, "name": g.name, "memory_mb": g.memory_mb,
                      "foreign_mb": g.foreign_mb, "compute_capability": g.cc, "free_mb": room.gpu_free[i],
                      **card_use(readings, g.index, mig=g.index in migs)}
                     for i, g in enumerate(view.gpus)],
            "host": host, "version": record.register.get("version", ""),
            "load": {"cpu_percent": beat.get("cpu_percent"), "memory_used_mb": beat.get("memory_used_mb"),
                     "memory_available_mb": beat.get("memory_available_mb")},
        })
        return doc

    async def nodes(self) -> list[dict[str, Any]]:
        views, replicas, records = await self._cluster()
        by_id = {v.id: v for v in views}
        return [self.node_view(r, by_id.get(r.id), replicas) for r in records.values()]

    async def find_node(self, ident: str) -> NodeRecord:
        """The node named `ident`, by its name or its id, or a refusal naming the nodes there are."""
        records = {r.id: r for r in await self.store.list_nodes()}
        return records[self._node_id(ident, records)]

    async def node(self, ident: str) -> dict[str, Any]:
        views, replicas, records = await self._cluster()
        record = records[self._node_id(ident, records)]
        view = next((v for v in views if v.id == record.id), None)
        doc = self.node_view(record, view, replicas)
        doc["replica_list"] = [self.replica_view(r, records) for r in replicas
                               if r.node_id == record.id and r.state not in GONE]
        doc["heartbeat"] = record.heartbeat
        return doc

    async def explain(self, name: str, demand: Demand | None = None) -> dict[str, Any]:
        record = await self._record(name)
        self._spec(record)
        nodes, replicas, _ = await self._cluster()
        entries = await self._entries()
        return explain_view(explain(record.name, entries, nodes, replicas, self.clock(), demand=demand,
                                    policy=self.policy))


def _restart_notes(spec: ModelSpec, count: int) -> list[str]:
    which = "its replica is" if count == 1 else f"its {count} replicas are"
    notes = [f"{which} replaced one at a time: each new one starts beside the old, which stops once the new one "
             "is ready, so the model keeps answering"]
    if spec.replace == "in_place":
        notes.append("where a node has no room beside one, it is stopped first and its replacement started in "
                     "its place (replace: in_place); the model answers from its other replicas meanwhile")
    else:
        notes.append("where no node has room beside one, its replacement waits and says why "
                     f"(llmgw ctl explain-placement {spec.name})")
    notes.append(f"llmgw ctl replicas --model {spec.name} shows how far it has got")
    return notes


def _output(spec: dict[str, Any]) -> str:
    """What a ComfyUI model's document says it makes (pictures unless it says otherwise); "" for any other."""
    media = spec.get("comfyui")
    if not isinstance(media, dict):
        return ""
    output = media.get("output", "pictures")
    return output if isinstance(output, str) else ""

