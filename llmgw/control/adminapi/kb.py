"""The admin API's knowledge-base routes: what `llmgw ctl kb` calls (docs/knowledge.md).

    GET    /api/v1/kb               every knowledge base: name, owner, model, files, bytes
    POST   /api/v1/kb               {"name", "project": "Org/Team/Project" | "team": "Org/Team" | "org": "Org",
                                     "embedding_model"}: made for that place, whose keys all may use it
    GET    /api/v1/kb/{id}          one, with its grants and files (the first 100, newest first)
    DELETE /api/v1/kb/{id}          it, its files' places in it and its passages, on every control plane
    POST   /api/v1/kb/{id}/grants   {"scope": "project"|"team"|"org"|"key", "place", "access": "read"|"write"}
    POST   /api/v1/kb/{id}/revoke   {"scope", "place"}

The administrator sees every knowledge base; a key sees those of its
project, team and org and those given to it (/v1/vector_stores). The work
is control/knowledge.py's, which /admin/kb calls too; its refusals (an
AccountError) are answered with their status by the admin API's guard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.kb import KnowledgeBases
from llmgw.store import KB_OWNER_SCOPES

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/kb", kb_list)
    router.add_post("/api/v1/kb", kb_create)
    router.add_get("/api/v1/kb/{kb_id}", kb_show)
    router.add_delete("/api/v1/kb/{kb_id}", kb_delete)
    router.add_post("/api/v1/kb/{kb_id}/grants", kb_grant)
    router.add_post("/api/v1/kb/{kb_id}/revoke", kb_revoke)


def _bases(request: web.Request) -> KnowledgeBases:
    plane: ControlPlane = request.app[PLANE]
    return plane.knowledge


async def kb_list(request: web.Request) -> web.Response:
    return _json({"knowledge_bases": await _bases(request).every()})


async def kb_show(request: web.Request) -> web.Response:
    return _json(await _bases(request).show(request.match_info["kb_id"]))


async def kb_create(request: web.Request) -> web.Response:
    data = await body(request)
    unknown = sorted(set(data) - {"name", "project", "team", "org", "embedding_model"})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are embedding_model, name, and one of "
                           "project, team, org", "invalid_request")
    owners = [scope for scope in KB_OWNER_SCOPES if data.get(scope)]
    if len(owners) != 1:
        raise Refused(400, "name the one place it is for: project ORG/TEAM/PROJECT, team ORG/TEAM or org ORG",
                      "invalid_request")
    view = await _bases(request).create(actor(request), _field(data, "name", str, required=True), owners[0],
                                        _field(data, owners[0], str, required=True),
                                        _field(data, "embedding_model", str) or "")
    return _json({"knowledge_base": view}, 201)


async def kb_delete(request: web.Request) -> web.Response:
    view = await _bases(request).delete(actor(request), request.match_info["kb_id"])
    return _json({"knowledge_base": view, "deleted": True})


async def _grant_fields(request: web.Request, extra: set[str]) -> tuple[str, str, dict[str, Any]]:
    data = await body(request)
    unknown = sorted(set(data) - {"scope", "place", *extra})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}", "invalid_request")
    return _field(data, "scope", str, required=True), _field(data, "place", str, required=True), data


async def kb_grant(request: web.Request) -> web.Response:
    scope, place, data = await _grant_fields(request, {"access"})
    view = await _bases(request).grant(actor(request), request.match_info["kb_id"], scope, place,
                                       _field(data, "access", str) or "read")
    return _json({"grant": view})


async def kb_revoke(request: web.Request) -> web.Response:
    scope, place, _ = await _grant_fields(request, set())
    return _json({"revoked": await _bases(request).revoke(actor(request), request.match_info["kb_id"], scope, place)})
