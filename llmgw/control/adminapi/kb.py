"""The admin API's knowledge-base routes: what `llmgw ctl kb` calls (docs/knowledge.md).

    GET    /api/v1/kb               every knowledge base: name, owner, model, files, bytes
    POST   /api/v1/kb               {"name", "project": "Org/Team/Project" | "team": "Org/Team" | "org": "Org",
                                     "embedding_model"}: made for that place, whose keys all may use it
    GET    /api/v1/kb/{id}          one, with its grants and files (the first 100, newest first)
    DELETE /api/v1/kb/{id}          it, its files' places in it and its passages, on every control plane
    POST   /api/v1/kb/{id}/grants   {"scope": "project"|"team"|"org"|"key", "place", "access": "read"|"write"}
    POST   /api/v1/kb/{id}/revoke   {"scope", "place"}

The administrator sees every knowledge base; a key sees those of its
project, team and org and those given to it (/v1/vector_stores). Making,
deleting, granting and revoking are in the audit log (`kb.create`,
`kb.delete`, `kb.grant`, `kb.revoke`, target kb:ID).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.account import parse_project_path
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.kb import DEFAULT_OVERLAP, DEFAULT_TOKENS, new_vector_store_id
from llmgw.store import KB_ACCESS, KB_GRANT_SCOPES, KB_OWNER_SCOPES, KbCounts, KbFile, KbGrant, VectorStore, shown_name

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane



def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/kb", kb_list)
    router.add_post("/api/v1/kb", kb_create)
    router.add_get("/api/v1/kb/{kb_id}", kb_show)
    router.add_delete("/api/v1/kb/{kb_id}", kb_delete)
    router.add_post("/api/v1/kb/{kb_id}/grants", kb_grant)
    router.add_post("/api/v1/kb/{kb_id}/revoke", kb_revoke)


async def _named(plane: ControlPlane, scope: str, ident: str) -> str:
    """A place (or a key) as people name it: Org/Team/Project, Org/Team, Org, or the key's name and id."""
    store = plane.store
    if scope == "project":
        path = await store.project_path(ident)
        return str(path) if path is not None else ident
    if scope == "team":
        team = await store.team_by_id(ident)
        org = await store.org_by_id(team.org_id) if team is not None else None
        return f"{org.name}/{team.name}" if team is not None and org is not None else ident
    if scope == "org":
        found = await store.org_by_id(ident)
        return found.name if found is not None else ident
    key = await store.key_by_id(ident)
    return f"{key.name} ({ident})" if key is not None else ident


async def _place(plane: ControlPlane, scope: str, place: str) -> str:
    """The id of the place (or key) named; 404 for one there is not."""
    store = plane.store
    found: str | None = None
    if scope == "project":
        try:
            path = await store.project_by_path(*parse_project_path(place))
        except ValueError as e:
            raise Refused(400, str(e), "invalid_request") from None
        found = path.project.id if path is not None else None
    elif scope == "team":
        org_name, _, team_name = place.partition("/")
        org = await store.org_by_name(org_name) if team_name and "/" not in team_name else None
        team = await store.team_by_name(org.id, team_name) if org is not None else None
        found = team.id if team is not None else None
    elif scope == "org":
        org = await store.org_by_name(place)
        found = org.id if org is not None else None
    elif scope == "key":
        key = await store.key_by_id(place)
        found = key.id if key is not None else None
    else:
        raise Refused(400, f"scope is one of {', '.join(KB_GRANT_SCOPES)}, got {scope!r}", "invalid_request")
    if found is None:
        raise Refused(404, f"there is no {scope} {place}; `llmgw ctl tree` shows the places, `llmgw keys list` "
                           "the keys", "not_found")
    return found


async def _view(plane: ControlPlane, vs: VectorStore, counts: KbCounts | None) -> dict[str, Any]:
    counts = counts or KbCounts()
    return {"id": vs.id, "name": vs.name,
            "owner": {"scope": vs.owner_scope, "place": await _named(plane, vs.owner_scope, vs.owner_id)},
            "embedding_model": vs.embedding_model, "created_at": vs.created_at, "last_active_at": vs.last_active_at,
            "files": {"in_progress": counts.in_progress, "completed": counts.completed, "failed": counts.failed,
                      "cancelled": counts.cancelled, "total": counts.total},
            "usage_bytes": counts.usage_bytes, "metadata": vs.metadata}


def _file_view(file: KbFile, names: dict[str, str]) -> dict[str, Any]:
    return {"file_id": file.file_id, "name": names.get(file.file_id, file.file_id), "status": file.status,
            "bytes": file.bytes, "passages": file.passages, "created_at": file.created_at,
            "last_error": file.last_error, "skipped_passages": len(file.skipped)}


async def kb_list(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    bases = await plane.store.all_vector_stores()
    counts = await plane.store.vector_store_counts([vs.id for vs in bases])
    return _json({"knowledge_bases": [await _view(plane, vs, counts.get(vs.id)) for vs in bases]})


async def _found(plane: ControlPlane, kb_id: str) -> VectorStore:
    vs = await plane.store.vector_store(kb_id)
    if vs is None:
        raise Refused(404, f"there is no knowledge base {kb_id}; `llmgw ctl kb list` lists them", "not_found")
    return vs


async def kb_show(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    vs = await _found(plane, request.match_info["kb_id"])
    counts = await plane.store.vector_store_counts([vs.id])
    files = await plane.store.list_kb_files(vs.id, limit=100)
    names = {}
    for file in files:
        stored = await plane.store.file_by_id(file.file_id)
        if stored is not None:
            names[file.file_id] = shown_name(stored.filename)
    grants = [{"scope": g.scope, "place": await _named(plane, g.scope, g.scope_id), "access": g.access}
              for g in await plane.store.kb_grants(vs.id)]
    return _json({"knowledge_base": await _view(plane, vs, counts.get(vs.id)), "grants": grants,
                  "files": [_file_view(f, names) for f in files]})


async def kb_create(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    unknown = sorted(set(data) - {"name", "project", "team", "org", "embedding_model"})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are embedding_model, name, and one of "
                           "project, team, org", "invalid_request")
    name = _field(data, "name", str, required=True)
    model = _field(data, "embedding_model", str) or plane.settings.current.router.knowledge.embedding_model
    if not model:
        raise Refused(400, "name the model that embeds it (--embedding-model), or set "
                           "router.knowledge.embedding_model", "invalid_request")
    owners = [scope for scope in KB_OWNER_SCOPES if data.get(scope)]
    if len(owners) != 1:
        raise Refused(400, "name the one place it is for: project ORG/TEAM/PROJECT, team ORG/TEAM or org ORG",
                      "invalid_request")
    scope = owners[0]
    owner = await _place(plane, scope, _field(data, scope, str, required=True))
    now = time.time()
    vs = VectorStore(new_vector_store_id(), owner, None, name[:256], model, DEFAULT_TOKENS, DEFAULT_OVERLAP, now,
                     now, owner_scope=scope)
    await plane.store.add_vector_store(vs)
    view = await _view(plane, vs, None)
    await plane.accounts.audit(actor(request), "kb.create", f"kb:{vs.id}", None, view)
    return _json({"knowledge_base": view}, 201)


async def kb_delete(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    vs = await _found(plane, request.match_info["kb_id"])
    counts = await plane.store.vector_store_counts([vs.id])
    view = await _view(plane, vs, counts.get(vs.id))
    await plane.store.delete_vector_store(vs.id)
    await plane.accounts.audit(actor(request), "kb.delete", f"kb:{vs.id}", view, None)
    return _json({"knowledge_base": view, "deleted": True})


async def _grant_fields(request: web.Request, extra: set[str]) -> tuple[str, str, dict[str, Any]]:
    data = await body(request)
    unknown = sorted(set(data) - {"scope", "place", *extra})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}", "invalid_request")
    return _field(data, "scope", str, required=True), _field(data, "place", str, required=True), data


async def kb_grant(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    vs = await _found(plane, request.match_info["kb_id"])
    scope, place, data = await _grant_fields(request, {"access"})
    level = _field(data, "access", str) or "read"
    if level not in KB_ACCESS:
        raise Refused(400, f"access is read or write, got {level!r}", "invalid_request")
    grant = KbGrant(vs.id, scope, await _place(plane, scope, place), level)
    await plane.store.grant_kb(grant)
    view = {"scope": scope, "place": await _named(plane, scope, grant.scope_id), "access": level}
    await plane.accounts.audit(actor(request), "kb.grant", f"kb:{vs.id}", None, view)
    return _json({"grant": view})


async def kb_revoke(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    vs = await _found(plane, request.match_info["kb_id"])
    scope, place, _ = await _grant_fields(request, set())
    ident = await _place(plane, scope, place)
    if not await plane.store.revoke_kb(vs.id, scope, ident):
        raise Refused(404, f"knowledge base {vs.id} was not given to {scope} {place}", "not_found")
    view = {"scope": scope, "place": await _named(plane, scope, ident)}
    await plane.accounts.audit(actor(request), "kb.revoke", f"kb:{vs.id}", view, None)
    return _json({"revoked": view})
