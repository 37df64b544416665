"""The admin API's catalog routes: models, nodes, replicas and why a model is placed where it is.

    GET    /api/v1/models                      every model, with its state and replicas
    POST   /api/v1/models                      {"spec": {...}}: add a model (a model file, as JSON)
    POST   /api/v1/models/serve                {"source", "engine", "gpus", "context", "name", "memory", …}
    GET    /api/v1/models/{name}               one model, its spec and replicas
    DELETE /api/v1/models/{name}?purge=true    remove it (with --purge, its files on the nodes too)
    POST   /api/v1/models/{name}/stop|start
    POST   /api/v1/models/{name}/scale         {"min", "max"}
    POST   /api/v1/models/{name}/resources     {"cores", "memory", "profile"}
    POST   /api/v1/models/{name}/context       {"tokens", "slots", "max_output"}
    POST   /api/v1/models/{name}/gpus          {"count", "profile", "in_place"}
    POST   /api/v1/models/{name}/restart       replace each replica, one at a time, the new one beside the old
    GET    /api/v1/models/{name}/placement     explain-placement
    GET    /api/v1/nodes, /api/v1/nodes/{node}
    GET    /api/v1/replicas?model=&node=&engine=1
    GET    /api/v1/mirrors                     the model mirrors and the files on them (docs/mirror.md)
    GET    /api/v1/presets                     llmgw's own models, each with where it stands (docs/media.md)
    POST   /api/v1/presets/auto                {"on": true|false}: presets.auto
    POST   /api/v1/presets/{name}              add a preset by hand (and take it off presets.declined)

Every change is in the audit log as model.add, model.scale, … with target
model:NAME and the spec before and after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.control.catalog.changes import Refusal, ServeChoices
from llmgw.control.catalog.service import Catalog
from llmgw.control.engineloads import engine_figures

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


def catalog(request: web.Request) -> Catalog:
    return catalog_of(request.app[PLANE])


def catalog_of(plane: ControlPlane) -> Catalog:
    """The catalog the admin API reads and changes; the cluster's MCP tools (llmgw.mcp.cluster) read the same."""
    found = getattr(plane, "catalog", None)  # the reconciler's, with its policy, where it has one
    if isinstance(found, Catalog):
        return found
    return Catalog(plane.store, plane.accounts.audit, hub=lambda: plane.settings.current.hub,
                   hub_client=plane.hub_client)


_Handler = Callable[[web.Request], Awaitable[web.Response]]


def refusals(handler: _Handler) -> _Handler:
    @wraps(handler)
    async def run(request: web.Request) -> web.Response:
        try:
            response = await handler(request)
        except Refusal as e:
            raise Refused(e.status, str(e), e.code) from None
        if request.method != "GET":
            # A change to the catalog: the leader's next pass now, not within PASS_EVERY, so a model
            # just added is known to the routers (503 until it has a replica) before the client asks.
            cluster = getattr(request.app[PLANE], "cluster", None)
            if cluster is not None:
                cluster.agents.changed.set()
        return response
    return run


def _int(data: dict[str, Any], name: str) -> int | None:
    return _field(data, name, int)


def _known(data: dict[str, Any], *names: str) -> None:
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are {', '.join(names)}",
                      "invalid_request")


@refusals
async def models_list(request: web.Request) -> web.Response:
    return _json(await catalog(request).list_models())


@refusals
async def model_add(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "spec", "trust")
    spec = _field(data, "spec", dict, required=True)
    trust = bool(_field(data, "trust", bool))
    return _json(await catalog(request).add(actor(request), spec, trust=trust), 201)


@refusals
async def model_serve(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "source", "engine", "gpus", "context", "slots", "name", "memory", "cores", "sha256", "min", "trust",
           "layout")
    least = _int(data, "min")
    choices: ServeChoices = {
        "name": _field(data, "name", str), "engine": _field(data, "engine", str), "gpus": _int(data, "gpus"),
        "context": _int(data, "context"), "slots": _int(data, "slots"), "memory": _field(data, "memory", str),
        "cores": _int(data, "cores"), "sha256": _field(data, "sha256", str),
        "min_": 1 if least is None else least,
    }
    result = await catalog(request).serve(actor(request), _field(data, "source", str, required=True),
                                          trust=bool(_field(data, "trust", bool)), layout=_int(data, "layout"),
                                          **choices)
    return _json(result, 201)


@refusals
async def model_upstream(request: web.Request) -> web.Response:
    return _json(await catalog(request).update(actor(request), request.match_info["name"]))


@refusals
async def model_update(request: web.Request) -> web.Response:
    return _json(await catalog(request).update(actor(request), request.match_info["name"], apply=True))


@refusals
async def model_plan(request: web.Request) -> web.Response:
    source = request.query.get("source", "").strip()
    if not source:
        raise Refused(400, "give the model to plan: ?source=hf:org/repo[/file.gguf]", "invalid_request")
    given = request.query.get("context", "0")
    if not given.isdigit():
        raise Refused(400, f"context must be a whole number of tokens, got {given!r}", "invalid_request")
    return _json(await catalog(request).plan(source, int(given)))


@refusals
async def model_explore(request: web.Request) -> web.Response:
    given = request.query.get("limit", "20")
    if not given.isdigit():
        raise Refused(400, f"limit must be a whole number, got {given!r}", "invalid_request")
    return _json(await catalog(request).explore(request.query.get("q", ""), int(given)))


@refusals
async def model_show(request: web.Request) -> web.Response:
    return _json(await catalog(request).show(request.match_info["name"]))


@refusals
async def model_remove(request: web.Request) -> web.Response:
    purge = request.query.get("purge", "").lower() in ("1", "true", "yes")
    who = actor(request)
    answer = await catalog(request).remove(who, request.match_info["name"], purge=purge)
    presets = getattr(request.app[PLANE], "presets", None)
    if presets is not None:
        # A preset removed is declined, or the leader's next presets pass would add it back.
        said = await presets.removed(who, answer["model"])
        if said:
            answer["notes"].append(said)
    return _json(answer)


@refusals
async def presets_list(request: web.Request) -> web.Response:
    return _json(await request.app[PLANE].presets.view())


@refusals
async def preset_add(request: web.Request) -> web.Response:
    return _json(await request.app[PLANE].presets.add(actor(request), request.match_info["name"]), 201)


@refusals
async def presets_auto(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "on")
    return _json(await request.app[PLANE].presets.set_auto(actor(request), _field(data, "on", bool, required=True)))


@refusals
async def model_stop(request: web.Request) -> web.Response:
    return _json(await catalog(request).stop(actor(request), request.match_info["name"]))


@refusals
async def model_start(request: web.Request) -> web.Response:
    return _json(await catalog(request).start(actor(request), request.match_info["name"]))


@refusals
async def model_scale(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "min", "max")
    return _json(await catalog(request).scale(actor(request), request.match_info["name"],
                                              _int(data, "min"), _int(data, "max")))


@refusals
async def model_resources(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "cores", "memory", "profile")
    return _json(await catalog(request).resources(actor(request), request.match_info["name"], _int(data, "cores"),
                                                  _field(data, "memory", str), _field(data, "profile", str)))


@refusals
async def model_context(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "tokens", "slots", "max_output")
    return _json(await catalog(request).context(actor(request), request.match_info["name"], _int(data, "tokens"),
                                                _int(data, "slots"), _int(data, "max_output")))


@refusals
async def model_gpus(request: web.Request) -> web.Response:
    data = await body(request)
    _known(data, "count", "profile", "in_place")
    return _json(await catalog(request).gpus(actor(request), request.match_info["name"],
                                             _field(data, "count", int, required=True), _field(data, "profile", str),
                                             bool(_field(data, "in_place", bool))))


@refusals
async def model_restart(request: web.Request) -> web.Response:
    return _json(await catalog(request).restart(actor(request), request.match_info["name"]))


@refusals
async def model_placement(request: web.Request) -> web.Response:
    return _json(await catalog(request).explain(request.match_info["name"]))


@refusals
async def nodes_list(request: web.Request) -> web.Response:
    return _json(await catalog(request).nodes())


@refusals
async def node_show(request: web.Request) -> web.Response:
    return _json(await catalog(request).node(request.match_info["node"]))


@refusals
async def replicas_list(request: web.Request) -> web.Response:
    replicas = await catalog(request).replicas(request.query.get("model"), request.query.get("node"))
    held = request.app[PLANE].routes.blocks_held
    for replica in replicas:
        if replica.get("id") in held:  # an engine whose KV events its agent follows (docs/routing.md)
            replica["cached_blocks"] = held[replica["id"]]
    if request.query.get("engine") in ("1", "true"):
        # Each ready engine's own figures, read now, for a person reading them (control/engineloads.py): up to
        # TIMEOUT_S with an engine that hangs, so never for the callers that poll this list.
        await engine_figures(replicas, request.app[PLANE].trust.engine_key or None)
    return _json(replicas)


async def mirrors_view(request: web.Request) -> web.Response:
    """The model mirrors as this control plane last read them (llmgw.control.mirrors), and every file on them."""
    return _json(request.app[PLANE].cluster.mirrors.view())


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/models", models_list)
    router.add_post("/api/v1/models", model_add)
    router.add_post("/api/v1/models/serve", model_serve)
    router.add_get("/api/v1/models/{name}", model_show)
    router.add_delete("/api/v1/models/{name}", model_remove)
    router.add_post("/api/v1/models/{name}/stop", model_stop)
    router.add_post("/api/v1/models/{name}/start", model_start)
    router.add_post("/api/v1/models/{name}/scale", model_scale)
    router.add_post("/api/v1/models/{name}/resources", model_resources)
    router.add_post("/api/v1/models/{name}/context", model_context)
    router.add_post("/api/v1/models/{name}/gpus", model_gpus)
    router.add_post("/api/v1/models/{name}/restart", model_restart)
    router.add_get("/api/v1/models/{name}/upstream", model_upstream)
    router.add_get("/api/v1/plan", model_plan)
    router.add_get("/api/v1/explore", model_explore)
    router.add_get("/api/v1/mirrors", mirrors_view)
    router.add_get("/api/v1/presets", presets_list)
    router.add_post("/api/v1/presets/auto", presets_auto)
    router.add_post("/api/v1/presets/{name}", preset_add)
    router.add_post("/api/v1/models/{name}/update", model_update)
    router.add_get("/api/v1/models/{name}/placement", model_placement)
    router.add_get("/api/v1/nodes", nodes_list)
    router.add_get("/api/v1/nodes/{node}", node_show)
    router.add_get("/api/v1/replicas", replicas_list)
