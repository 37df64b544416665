"""The admin API's knowledge-base routes: what `llmgw ctl kb` calls (docs/knowledge.md).

    GET    /api/v1/kb               every project's knowledge bases: name, project, model, files, bytes
    POST   /api/v1/kb               {"name", "project": "Org/Team/Project", "embedding_model"}: made for that project
    GET    /api/v1/kb/{id}          one, with its files (the first 100, newest first)
    DELETE /api/v1/kb/{id}          it, its files' places in it and its passages, on every control plane

The administrator sees every project's; a key sees its own project's
(/v1/vector_stores). Making and deleting are in the audit log (`kb.create`,
`kb.delete`, target kb:ID).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.account import parse_project_path
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.kb import DEFAULT_OVERLAP, DEFAULT_TOKENS, new_vector_store_id
from llmgw.store import KbCounts, KbFile, VectorStore, shown_name

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane



def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/kb", kb_list)
    router.add_post("/api/v1/kb", kb_create)
    router.add_get("/api/v1/kb/{kb_id}", kb_show)
    router.add_delete("/api/v1/kb/{kb_id}", kb_delete)


async def _view(plane: ControlPlane, vs: VectorStore, counts: KbCounts | None) -> dict[str, Any]:
    path = await plane.store.project_path(vs.project_id)
    counts = counts or KbCounts()
    return {"id": vs.id, "name": vs.name, "project": str(path) if path is not None else vs.project_id,
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
    return _json({"knowledge_base": await _view(plane, vs, counts.get(vs.id)),
                  "files": [_file_view(f, names) for f in files]})


async def kb_create(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    unknown = sorted(set(data) - {"name", "project", "embedding_model"})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are embedding_model, name, project",
                      "invalid_request")
    name = _field(data, "name", str, required=True)
    model = _field(data, "embedding_model", str) or plane.settings.current.router.knowledge.embedding_model
    if not model:
        raise Refused(400, "name the model that embeds it (--embedding-model), or set "
                           "router.knowledge.embedding_model", "invalid_request")
    project = _field(data, "project", str, required=True)
    try:
        org, team, leaf = parse_project_path(project)
    except ValueError as e:
        raise Refused(400, str(e), "invalid_request") from None
    path = await plane.store.project_by_path(org, team, leaf)
    if path is None:
        raise Refused(404, f"there is no project {project}; `llmgw ctl tree` shows them", "not_found")
    now = time.time()
    vs = VectorStore(new_vector_store_id(), path.project.id, None,
                     name[:256], model, DEFAULT_TOKENS, DEFAULT_OVERLAP, now, now)
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
