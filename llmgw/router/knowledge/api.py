"""`/v1/vector_stores` on the client port, in OpenAI's shapes (docs/knowledge.md).

Authorised by the API key as the rest of /v1 is, and a key sees its own
project's knowledge bases only: another project's is "not here", never
"not yours", so ids cannot be probed. A file comes from /v1/files (purpose
assistants) and is read, cut and embedded by ingest.py as the key that
added it; a search embeds the question as the key asking (embed.py).
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
from aiohttp import web

from llmgw.account import Principal
from llmgw.kb import (
    DEFAULT_OVERLAP,
    DEFAULT_TOKENS,
    HYBRID,
    MODES,
    Chunking,
    FilterError,
    KbIndex,
    kept_by,
    new_batch_id,
    new_vector_store_id,
    pack,
    parse_filter,
    search,
)
from llmgw.router.appkeys import PLANE
from llmgw.router.batches import own_file
from llmgw.router.body import read_json
from llmgw.router.call import Refuse
from llmgw.router.knowledge.access import OWN, READ, WRITE, allowed, places_of
from llmgw.router.knowledge.augment import Augmenter
from llmgw.router.knowledge.embed import EmbedFailed, embed_question
from llmgw.router.knowledge.ingest import Ingester
from llmgw.router.knowledge.shapes import cursor_page, file_object, hit_object, vector_store_object
from llmgw.router.plane import ClientPlane
from llmgw.router.refusing import refusing
from llmgw.store import KB_FILE_IN_PROGRESS, KB_FILE_STATUSES, KbCounts, KbFile, VectorStore

KNOWLEDGE = web.AppKey("knowledge", object)
MAX_PAGE = 100
MAX_RESULTS = 50  # passages one search answers, as OpenAI's max_num_results
MAX_METADATA = 16
MAX_ATTRIBUTES = 16
# The rankers a search may name: OpenAI's two (both hybrid here) and one per way of searching, for comparing them.
RANKERS = {"auto": HYBRID, "default-2024-11-15": HYBRID, **{f"llmgw-{mode}": mode for mode in MODES}}


class Knowledge:
    """One client app's index of knowledge bases and its imports, started and stopped with the app."""

    def __init__(self, plane: ClientPlane) -> None:
        self.plane = plane
        self.index = KbIndex(plane.store)
        self.ingester = Ingester(plane, self.index)
        self.augmenter = Augmenter(plane, self.index)

    def start(self) -> None:
        self.index.start()
        self.ingester.start()
        self.plane.router.augmenting = self.augmenter

    async def stop(self) -> None:
        self.plane.router.augmenting = None
        await self.ingester.stop()
        await self.index.stop()


def _knowledge(request: web.Request) -> Knowledge:
    found = request.app[KNOWLEDGE]
    assert isinstance(found, Knowledge)
    return found


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


_refusals = refusing("knowledge bases")


def _project(principal: Principal) -> str:
    return principal.path.project.id


async def _own(plane: ClientPlane, principal: Principal, vs_id: str, need: str = READ) -> VectorStore:
    return await allowed(plane.store, principal, vs_id, need)


async def _object(plane: ClientPlane, vs: VectorStore) -> dict[str, Any]:
    counts = await plane.store.vector_store_counts([vs.id])
    return vector_store_object(vs, counts.get(vs.id))


def _page_args(request: web.Request) -> tuple[int, str | None, bool]:
    text = request.query.get("limit", "20")
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise Refuse(400, f"limit must be a whole number from 1 to {MAX_PAGE}, got {text!r}", "invalid_request",
                     param="limit")
    order = request.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise Refuse(400, f'order must be "asc" or "desc", got {order!r}', "invalid_request", param="order")
    if request.query.get("before"):
        raise Refuse(400, "paging backwards (before) is not offered; page with after", "invalid_request",
                     param="before")
    return int(text), request.query.get("after") or None, order == "desc"


def _strings(value: Any, param: str, most: int) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > most or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in value.items()):
        raise Refuse(400, f"{param} is an object of at most {most} strings (keys of 64 characters at most, values "
                          "of 512)", "invalid_request", param=param)
    return dict(value)


def _attributes(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ATTRIBUTES or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, (str, int, float, bool))
            and not (isinstance(v, str) and len(v) > 512) for k, v in value.items()):
        raise Refuse(400, f"attributes is an object of at most {MAX_ATTRIBUTES} strings, numbers or booleans",
                     "invalid_request", param="attributes")
    return dict(value)


def _chunking(value: Any, default: Chunking) -> Chunking:
    if value is None:
        return default
    if not isinstance(value, dict) or value.get("type") not in ("auto", "static"):
        raise Refuse(400, 'chunking_strategy is {"type": "auto"} or {"type": "static", "static": '
                          '{"max_chunk_size_tokens": N, "chunk_overlap_tokens": M}}', "invalid_request",
                     param="chunking_strategy")
    if value["type"] == "auto":
        return default
    static = value.get("static")
    tokens = static.get("max_chunk_size_tokens") if isinstance(static, dict) else None
    overlap = static.get("chunk_overlap_tokens") if isinstance(static, dict) else None
    if not isinstance(tokens, int) or not isinstance(overlap, int) or isinstance(tokens, bool):
        raise Refuse(400, "a static chunking_strategy names max_chunk_size_tokens and chunk_overlap_tokens, whole "
                          "numbers", "invalid_request", param="chunking_strategy")
    chunking = Chunking(tokens, overlap)
    problem = chunking.problem()
    if problem is not None:
        raise Refuse(400, problem, "invalid_request", param="chunking_strategy")
    return chunking


def _model(plane: ClientPlane, principal: Principal, asked: Any) -> str:
    name = asked if isinstance(asked, str) and asked else plane.settings.current.router.knowledge.embedding_model
    if not name:
        raise Refuse(400, "name the model that embeds this knowledge base: \"embedding_model\", one of the models "
                          "GET /v1/models lists for embeddings (or set router.knowledge.embedding_model)",
                     "invalid_request", param="embedding_model")
    if plane.router.registry.model(name) is None:
        raise Refuse(404, f"there is no model {name} here to embed a knowledge base; GET /v1/models lists the "
                          "models this key may use", "model_not_found", param="embedding_model")
    if not principal.limits.allows_model(name):
        raise Refuse(403, f"this key may not use {name}, so it cannot embed a knowledge base with it",
                     "model_not_allowed", param="embedding_model")
    return name


# -- knowledge bases ---------------------------------------------------------------

@_refusals
async def create(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    body = await _body(request, plane)
    name = _name(body)
    chunking = _chunking(body.get("chunking_strategy"), Chunking(DEFAULT_TOKENS, DEFAULT_OVERLAP))
    file_ids = body.get("file_ids") or []
    if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids) or len(file_ids) > 500:
        raise Refuse(400, "file_ids is a list of at most 500 file ids", "invalid_request", param="file_ids")
    files = [await own_file(plane, principal, f, param="file_ids") for f in dict.fromkeys(file_ids)]
    now = time.time()
    vs = VectorStore(new_vector_store_id(), _project(principal), principal.key.id, (name or "")[:256],
                     _model(plane, principal, body.get("embedding_model")), chunking.tokens, chunking.overlap, now,
                     now, _strings(body.get("metadata"), "metadata", MAX_METADATA))
    await plane.store.add_vector_store(vs)
    for file in files:
        await _add_file(request, plane, principal, vs, file.id, file.bytes, chunking, {})
    return _json(await _object(plane, vs))


def _name(body: dict[str, Any]) -> str | None:
    """The body's name, checked, and a refusal of what is not offered with it."""
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise Refuse(400, "name is a string", "invalid_request", param="name")
    if body.get("expires_after") is not None:
        raise Refuse(400, "expires_after is not offered: a knowledge base is kept until deleted", "invalid_request",
                     param="expires_after")
    return name


async def _body(request: web.Request, plane: ClientPlane) -> dict[str, Any]:
    body = await read_json(request, int(plane.settings.current.router.max_body))
    if not isinstance(body, dict):
        raise Refuse(400, "the body is a JSON object", "invalid_request")
    return body


@_refusals
async def list_all(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    limit, after, newest_first = _page_args(request)
    found = await plane.store.list_vector_stores(places_of(principal), limit=limit + 1, after=after,
                                                 newest_first=newest_first)
    shown = found[:limit]
    counts = await plane.store.vector_store_counts([vs.id for vs in shown])
    return _json(cursor_page([vector_store_object(vs, counts.get(vs.id)) for vs in shown], len(found) > limit))


@_refusals
async def get_one(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json(await _object(plane, await _own(plane, principal, request.match_info["vs_id"])))


@_refusals
async def update(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"], WRITE)
    body = await _body(request, plane)
    name = _name(body)
    metadata = _strings(body["metadata"], "metadata", MAX_METADATA) if body.get("metadata") is not None else None
    changed = await plane.store.update_vector_store(vs.id, name=None if name is None else name[:256],
                                                    metadata=metadata)
    if changed is None:
        raise Refuse(404, f"knowledge base {vs.id} was deleted meanwhile", "vector_store_not_found")
    return _json(await _object(plane, changed))


@_refusals
async def delete(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"], OWN)
    deleted = await plane.store.delete_vector_store(vs.id)
    await _knowledge(request).index.catch_up()
    return _json({"id": vs.id, "object": "vector_store.deleted", "deleted": deleted})


# -- its files ---------------------------------------------------------------------

async def _add_file(request: web.Request, plane: ClientPlane, principal: Principal, vs: VectorStore, file_id: str,
                    size: int, chunking: Chunking, attributes: dict[str, Any], batch_id: str | None = None) -> KbFile:
    file = KbFile(vs.id, file_id, principal.key.id, KB_FILE_IN_PROGRESS, time.time(), size, chunking.tokens,
                  chunking.overlap, attributes=attributes, batch_id=batch_id)
    if await plane.store.add_kb_file(file):
        _knowledge(request).ingester.begin(file)
        return file
    there = await plane.store.kb_file(vs.id, file_id)
    return there or file


@_refusals
async def add_file(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"], WRITE)
    body = await _body(request, plane)
    file_id = body.get("file_id")
    if not isinstance(file_id, str) or not file_id:
        raise Refuse(400, 'name the file to add: "file_id", from POST /v1/files', "invalid_request", param="file_id")
    chunking = _chunking(body.get("chunking_strategy"), Chunking(vs.chunk_tokens, vs.chunk_overlap))
    stored = await own_file(plane, principal, file_id, param="file_id")
    added = await _add_file(request, plane, principal, vs, stored.id, stored.bytes, chunking,
                            _attributes(body.get("attributes")))
    return _json(file_object(added))


async def _own_kb_file(plane: ClientPlane, principal: Principal, request: web.Request,
                       need: str = READ) -> KbFile:
    vs = await _own(plane, principal, request.match_info["vs_id"], need)
    file_id = request.match_info["file_id"]
    file = await plane.store.kb_file(vs.id, file_id)
    if file is None:
        raise Refuse(404, f"{file_id} is not in knowledge base {vs.id}; GET /v1/vector_stores/{vs.id}/files lists "
                          "its files", "file_not_found")
    return file


@_refusals
async def list_files(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"])
    limit, after, newest_first = _page_args(request)
    status = request.query.get("filter") or None
    if status is not None and status not in KB_FILE_STATUSES:
        raise Refuse(400, f"filter is one of {', '.join(KB_FILE_STATUSES)}, got {status!r}", "invalid_request",
                     param="filter")
    found = await plane.store.list_kb_files(vs.id, status=status, limit=limit + 1, after=after,
                                            newest_first=newest_first)
    return _json(cursor_page([file_object(f) for f in found[:limit]], len(found) > limit))


@_refusals
async def get_file(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json(file_object(await _own_kb_file(plane, principal, request)))


@_refusals
async def remove_file(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    file = await _own_kb_file(plane, principal, request, WRITE)
    removed = await plane.store.remove_kb_file(file.vector_store_id, file.file_id)
    await _knowledge(request).index.catch_up()
    return _json({"id": file.file_id, "object": "vector_store.file.deleted", "deleted": removed})


# -- file batches ------------------------------------------------------------------

_BATCH_ID = re.compile(r"^vsfb_[A-Za-z0-9]{24}$")


def _batch_object(vs_id: str, batch_id: str, counts: KbCounts, created_at: float) -> dict[str, Any]:
    status = "in_progress" if counts.in_progress else "cancelled" if counts.cancelled else "completed"
    return {"id": batch_id, "object": "vector_store.files_batch", "created_at": int(created_at),
            "vector_store_id": vs_id, "status": status,
            "file_counts": {"in_progress": counts.in_progress, "completed": counts.completed,
                            "failed": counts.failed, "cancelled": counts.cancelled, "total": counts.total}}


async def _own_batch(plane: ClientPlane, principal: Principal, request: web.Request,
                     need: str = READ) -> tuple[VectorStore, str, dict[str, Any]]:
    vs = await _own(plane, principal, request.match_info["vs_id"], need)
    batch_id = request.match_info["batch_id"]
    found = await plane.store.kb_batch_counts(vs.id, batch_id) if _BATCH_ID.match(batch_id) else None
    if found is None:
        raise Refuse(404, f"there is no file batch {batch_id} in knowledge base {vs.id}", "file_batch_not_found")
    return vs, batch_id, _batch_object(vs.id, batch_id, *found)


@_refusals
async def create_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"], WRITE)
    body = await _body(request, plane)
    default = _chunking(body.get("chunking_strategy"), Chunking(vs.chunk_tokens, vs.chunk_overlap))
    attributes = _attributes(body.get("attributes"))
    wanted: list[tuple[str, Chunking, dict[str, Any]]] = []
    file_ids, files = body.get("file_ids"), body.get("files")
    if file_ids is not None and files is not None:
        raise Refuse(400, "name the files by file_ids or by files, not both", "invalid_request", param="files")
    if files is not None:
        if not isinstance(files, list) or not 1 <= len(files) <= 500 or not all(
                isinstance(f, dict) and isinstance(f.get("file_id"), str) for f in files):
            raise Refuse(400, "files is a list of 1 to 500 objects, each with a file_id", "invalid_request",
                         param="files")
        wanted = [(f["file_id"], _chunking(f.get("chunking_strategy"), default),
                   _attributes(f["attributes"]) if f.get("attributes") is not None else attributes) for f in files]
    else:
        if not isinstance(file_ids, list) or not 1 <= len(file_ids) <= 500 or not all(
                isinstance(f, str) for f in file_ids):
            raise Refuse(400, "file_ids is a list of 1 to 500 file ids, from POST /v1/files", "invalid_request",
                         param="file_ids")
        wanted = [(f, default, attributes) for f in file_ids]
    stored = {f: await own_file(plane, principal, f, param="file_ids") for f, _, _ in wanted}
    batch_id = new_batch_id()
    for file_id, chunking, attrs in wanted:
        await _add_file(request, plane, principal, vs, file_id, stored[file_id].bytes, chunking, attrs, batch_id)
    found = await plane.store.kb_batch_counts(vs.id, batch_id)
    counts, made = found if found is not None else (KbCounts(), time.time())
    return _json(_batch_object(vs.id, batch_id, counts, made))


@_refusals
async def get_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json((await _own_batch(plane, principal, request))[2])


@_refusals
async def cancel_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs, batch_id, _ = await _own_batch(plane, principal, request, WRITE)
    await plane.store.cancel_kb_batch(vs.id, batch_id)
    return _json((await _own_batch(plane, principal, request))[2])


@_refusals
async def list_batch_files(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs, batch_id, _ = await _own_batch(plane, principal, request)
    limit, after, newest_first = _page_args(request)
    status = request.query.get("filter") or None
    if status is not None and status not in KB_FILE_STATUSES:
        raise Refuse(400, f"filter is one of {', '.join(KB_FILE_STATUSES)}, got {status!r}", "invalid_request",
                     param="filter")
    found = await plane.store.list_kb_files(vs.id, status=status, limit=limit + 1, after=after,
                                            newest_first=newest_first, batch_id=batch_id)
    return _json(cursor_page([file_object(f) for f in found[:limit]], len(found) > limit))


# -- search ------------------------------------------------------------------------

@_refusals
async def search_one(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    vs = await _own(plane, principal, request.match_info["vs_id"])
    body = await _body(request, plane)
    query = body.get("query")
    if isinstance(query, list) and query and all(isinstance(q, str) for q in query):
        query = " ".join(query)
    if not isinstance(query, str) or not query.strip():
        raise Refuse(400, "query is the question to search for, a string", "invalid_request", param="query")
    test = None
    if body.get("filters") is not None:
        try:
            test = parse_filter(body["filters"])
        except FilterError as e:
            raise Refuse(400, f"{e}; docs/knowledge.md shows the filters", "invalid_request",
                         param="filters") from None
    most = body.get("max_num_results", 10)
    if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= MAX_RESULTS:
        raise Refuse(400, f"max_num_results is a whole number from 1 to {MAX_RESULTS}", "invalid_request",
                     param="max_num_results")
    options = body.get("ranking_options") or {}
    ranker = options.get("ranker", "auto") if isinstance(options, dict) else None
    if not isinstance(ranker, str) or ranker not in RANKERS:
        raise Refuse(400, f"ranking_options.ranker is one of {', '.join(RANKERS)}", "invalid_request",
                     param="ranking_options")
    threshold = options.get("score_threshold", 0.0)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise Refuse(400, "ranking_options.score_threshold is a number from 0 to 1", "invalid_request",
                     param="ranking_options")
    mode = RANKERS[ranker]
    vector = None
    if mode != "words":
        try:
            vector = pack(await embed_question(plane, principal, vs.embedding_model, query))
        except EmbedFailed as e:
            raise Refuse(e.status, f"the question could not be embedded by {vs.embedding_model}: {e.message}",
                         e.code) from None
    only = None if test is None else await kept_by(plane.store, [vs.id], test)
    hits = await search(plane.store, _knowledge(request).index, [vs.id], query, vector, most, mode, only)
    data = [hit_object(h) for h in hits if h.score >= threshold]
    return _json({"object": "vector_store.search_results.page", "search_query": [query], "data": data,
                  "has_more": False, "next_page": None})


async def _started(app: web.Application) -> None:
    knowledge = Knowledge(app[PLANE])
    app[KNOWLEDGE] = knowledge
    knowledge.start()


async def _stopped(app: web.Application) -> None:
    knowledge = app.get(KNOWLEDGE)
    if isinstance(knowledge, Knowledge):
        await knowledge.stop()


def add_routes(app: web.Application) -> None:
    app.on_startup.append(_started)
    app.on_cleanup.append(_stopped)
    app.router.add_post("/v1/vector_stores", create)
    app.router.add_get("/v1/vector_stores", list_all)
    app.router.add_get("/v1/vector_stores/{vs_id}", get_one)
    app.router.add_post("/v1/vector_stores/{vs_id}", update)
    app.router.add_delete("/v1/vector_stores/{vs_id}", delete)
    app.router.add_post("/v1/vector_stores/{vs_id}/files", add_file)
    app.router.add_get("/v1/vector_stores/{vs_id}/files", list_files)
    app.router.add_get("/v1/vector_stores/{vs_id}/files/{file_id}", get_file)
    app.router.add_delete("/v1/vector_stores/{vs_id}/files/{file_id}", remove_file)
    app.router.add_post("/v1/vector_stores/{vs_id}/file_batches", create_batch)
    app.router.add_get("/v1/vector_stores/{vs_id}/file_batches/{batch_id}", get_batch)
    app.router.add_post("/v1/vector_stores/{vs_id}/file_batches/{batch_id}/cancel", cancel_batch)
    app.router.add_get("/v1/vector_stores/{vs_id}/file_batches/{batch_id}/files", list_batch_files)
    app.router.add_post("/v1/vector_stores/{vs_id}/search", search_one)
