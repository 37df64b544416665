"""`/v1/files` and `/v1/batches` on the client port, in OpenAI's shapes (docs/batches.md).

Authorised by the API key as the rest of /v1 is (the client app's
middleware), and a key sees its own project's files and batches only: one
of another project's is "not here", never "not yours", so ids cannot be
probed. The runner that sends a batch's lines is runner.py, on the leader.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson
from aiohttp import BodyPartReader, web

from llmgw.account import Principal
from llmgw.router.batches.inputs import ENDPOINTS, InputError, read_lines
from llmgw.router.batches.keeper import FileKeeper, is_file_id, new_file_id, place_for
from llmgw.router.batches.shapes import batch_object, file_object, page
from llmgw.router.body import read_json
from llmgw.router.call import Refuse
from llmgw.router.plane import ClientPlane
from llmgw.router.refusing import refusing
from llmgw.store import Batch, StoredFile

WINDOW = "24h"  # the one completion window, as OpenAI's
WINDOW_SECONDS = 86400.0
UPLOAD_PURPOSES = ("batch", "assistants", "user_data", "vision")
# The purposes whose files are documents for knowledge bases (docs/knowledge.md): read when one is added to a base.
DOCUMENT_PURPOSES = ("assistants", "user_data")
MAX_METADATA = 16  # pairs, as OpenAI takes them: keys of 64 characters at most, values of 512
_PURPOSE_BYTES = 64
_CHUNK = 64 * 1024


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


_refusals = refusing("files and batches")


def keeper(plane: ClientPlane) -> FileKeeper:
    return FileKeeper(plane.store, plane.cfg.data_dir)


def _project(principal: Principal) -> str:
    return principal.path.project.id


async def own_file(plane: ClientPlane, principal: Principal, file_id: str, param: str | None = None) -> StoredFile:
    file = await plane.store.file_by_id(file_id) if is_file_id(file_id) else None
    if file is None or file.project_id != _project(principal):
        raise Refuse(404, f"there is no file {file_id} in this key's project; GET /v1/files lists them",
                     "file_not_found", param=param)
    return file


def _limit(request: web.Request, most: int) -> int:
    text = request.query.get("limit")
    if text is None:
        return most
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise Refuse(400, f"limit must be a whole number from 1 to {most}, got {text!r}", "invalid_request",
                     param="limit")
    return int(text)


# -- files -------------------------------------------------------------------

@_refusals
async def upload(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    settings = plane.settings.current.router.batch
    if not request.content_type.startswith("multipart/form-data"):
        raise Refuse(400, 'POST /v1/files takes multipart/form-data with "purpose" and "file"', "invalid_request")
    try:
        purpose, filename, content = await _read_upload(request, int(settings.max_file_bytes))
    except ValueError as e:  # aiohttp's word for a body that is not the multipart it says
        raise Refuse(400, f"the upload is not multipart/form-data that can be read ({e}); send \"purpose\" and "
                          "\"file\" as form fields", "invalid_request") from None
    if purpose is None:
        raise Refuse(400, 'the upload needs "purpose": batch', "invalid_request", param="purpose")
    if purpose not in UPLOAD_PURPOSES:
        raise Refuse(400, f'purpose must be one of {", ".join(UPLOAD_PURPOSES)}, got {purpose!r}; this gateway '
                          "takes files for batches (batch), documents for knowledge bases (assistants) and pictures "
                          "for workflows (vision)",
                     "invalid_request", param="purpose")
    if content is None or filename is None:
        what = ("a document" if purpose in DOCUMENT_PURPOSES else "a picture" if purpose == "vision"
                else "the JSON lines of a batch")
        raise Refuse(400, f'the upload needs "file": {what}', "invalid_request", param="file")
    if purpose == "batch":
        try:
            read_lines(content, settings.max_lines)
        except InputError as e:
            raise Refuse(400, f"{filename}: {e}", "invalid_file", param="file") from None
    project = _project(principal)
    await _within_quota(plane, project, len(content))
    file = StoredFile(new_file_id(), project, principal.key.id, purpose, filename[:255], len(content), time.time(),
                      place_for(len(content), int(settings.store_below)))
    await keeper(plane).keep(file, content)
    return _json(file_object(file))


async def _read_upload(request: web.Request, most: int) -> tuple[str | None, str | None, bytes | None]:
    """The form's purpose, the file's name and its bytes (None for a field not sent)."""
    purpose = filename = None
    content: bytes | None = None
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise Refuse(400, "a nested multipart part is not a file; send one file", "invalid_request")
        if part.name == "purpose":
            purpose = (await _read_part(part, _PURPOSE_BYTES, "purpose")).decode("utf-8", "replace").strip()
        elif part.name == "file":
            filename = part.filename or "upload.jsonl"
            content = await _read_part(part, most, "file")
        else:
            await part.release()  # a field this gateway does not use (expires_after): read past it
    return purpose, filename, content


async def _read_part(part: BodyPartReader, most: int, name: str) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk(_CHUNK):
        data += chunk
        if len(data) > most:
            if name == "file":
                raise Refuse(413, f"the file is larger than the {most} bytes one upload may be "
                                  "(router.batch.max_file_bytes); split it into several batches", "file_too_large",
                             param="file")
            raise Refuse(400, f'"{name}" is longer than any value it takes', "invalid_request", param=name)
    return bytes(data)


async def _within_quota(plane: ClientPlane, project: str, size: int) -> None:
    quota = int(plane.settings.current.router.batch.project_quota)
    held = await plane.store.project_file_bytes(project)
    if held + size > quota:
        raise Refuse(413, f"this project holds {held} bytes of files and may hold {quota} "
                          f"(router.batch.project_quota); this file of {size} bytes would pass that. Delete files "
                          "it no longer needs (DELETE /v1/files/ID), or ask an administrator for more",
                     "quota_exceeded", param="file")


@_refusals
async def list_files(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    limit = _limit(request, 10000)
    purpose = request.query.get("purpose") or None
    after = request.query.get("after") or None
    files = await plane.store.list_files(_project(principal), purpose=purpose, limit=limit + 1, after=after)
    return _json(page([file_object(f) for f in files[:limit]], len(files) > limit))


@_refusals
async def get_file(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json(file_object(await own_file(plane, principal, request.match_info["file_id"])))


@_refusals
async def delete_file(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    file = await own_file(plane, principal, request.match_info["file_id"])
    using = await plane.store.file_in_open_batch(file.id)
    if using is not None:
        raise Refuse(409, f"batch {using} is still running with {file.id}; cancel it "
                          f"(POST /v1/batches/{using}/cancel) or let it end, then delete the file", "file_in_use")
    # Out of every knowledge base first: a passage of a deleted file is never answered from (docs/knowledge.md).
    await plane.store.remove_file_from_kbs(file.id)
    deleted = await keeper(plane).delete(file)
    return _json({"id": file.id, "object": "file", "deleted": deleted})


@_refusals
async def file_content(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    file = await own_file(plane, principal, request.match_info["file_id"])
    content = await keeper(plane).read(file)
    if content is None:
        raise Refuse(404, f"the bytes of {file.id} are not on this control plane's disk; it was kept by a leader "
                          "that no longer leads (docs/batches.md)", "file_not_found")
    return web.Response(body=content, content_type=_content_type(file.filename, content))


# What a picture or a mesh a workflow made is served as, so a browser shows it and a download keeps its kind.
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"glTF", "model/gltf-binary"))


def _content_type(filename: str, content: bytes) -> str:
    if filename.endswith(".jsonl"):
        return "application/jsonl"
    return next((kind for sig, kind in _SIGNATURES if content.startswith(sig)), "application/octet-stream")


# -- batches -----------------------------------------------------------------

def metadata_of(value: Any) -> dict[str, str]:
    """A create's `metadata` as OpenAI takes it (a batch's, a workflow run's); Refuse for anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in value.items()):
        raise Refuse(400, f"metadata is at most {MAX_METADATA} pairs of text: keys of up to 64 characters, values of "
                          "up to 512", "invalid_request", param="metadata")
    return value


@_refusals
async def create_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    settings = plane.settings.current.router
    body = await read_json(request, int(settings.max_body))
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise Refuse(400, f"endpoint must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}", "invalid_request",
                     param="endpoint")
    window = body.get("completion_window")
    if window != WINDOW:
        raise Refuse(400, f'completion_window must be "{WINDOW}", got {window!r}', "invalid_request",
                     param="completion_window")
    metadata = metadata_of(body.get("metadata"))
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise Refuse(400, 'the batch needs "input_file_id": the id of a file uploaded with purpose batch',
                     "invalid_request", param="input_file_id")
    file = await own_file(plane, principal, file_id, "input_file_id")
    if file.purpose != "batch":
        raise Refuse(400, f"{file.id} was not uploaded with purpose batch (its purpose is {file.purpose})",
                     "invalid_request", param="input_file_id")
    content = await keeper(plane).read(file)
    if content is None:
        raise Refuse(404, f"the bytes of {file.id} are not on this control plane's disk", "file_not_found",
                     param="input_file_id")
    try:
        lines = read_lines(content, settings.batch.max_lines)
    except InputError as e:  # a limit lowered since the upload
        raise Refuse(400, f"{file.id}: {e}", "invalid_file", param="input_file_id") from None
    for line in lines:
        if line.url != endpoint:
            raise Refuse(400, f"{file.id}: line {line.number} is for {line.url}, and this batch is for {endpoint}; "
                              "one batch runs one endpoint", "invalid_file", param="input_file_id")
    now = time.time()
    batch = Batch("batch_" + secrets.token_hex(12), _project(principal), principal.key.id, endpoint, file.id, WINDOW,
                  "in_progress", len(lines), created_at=now, expires_at=now + WINDOW_SECONDS, in_progress_at=now,
                  metadata=metadata)
    await plane.store.add_batch(batch, [line.custom_id for line in lines])
    return _json(batch_object(batch))


async def _own_batch(plane: ClientPlane, principal: Principal, batch_id: str) -> Batch:
    batch = await plane.store.batch_by_id(batch_id)
    if batch is None or batch.project_id != _project(principal):
        raise Refuse(404, f"there is no batch {batch_id} in this key's project; GET /v1/batches lists them",
                     "batch_not_found")
    return batch


@_refusals
async def list_batches(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    limit = _limit(request, 100)
    after = request.query.get("after") or None
    batches = await plane.store.list_batches(_project(principal), limit=limit + 1, after=after)
    return _json(page([batch_object(b) for b in batches[:limit]], len(batches) > limit))


@_refusals
async def get_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json(batch_object(await _own_batch(plane, principal, request.match_info["batch_id"])))


@_refusals
async def cancel_batch(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    batch = await _own_batch(plane, principal, request.match_info["batch_id"])
    if batch.status in ("validating", "in_progress"):
        await plane.store.move_batch(batch.id, ("validating", "in_progress"), "cancelling",
                                     {"cancelling_at": time.time()})
    elif batch.status not in ("cancelling", "cancelled"):
        raise Refuse(409, f"batch {batch.id} is {batch.status} and can no longer be cancelled", "batch_ended")
    return _json(batch_object(await _own_batch(plane, principal, batch.id)))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/files", upload)
    app.router.add_get("/v1/files", list_files)
    app.router.add_get("/v1/files/{file_id}", get_file)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
    app.router.add_get("/v1/files/{file_id}/content", file_content)
    app.router.add_post("/v1/batches", create_batch)
    app.router.add_get("/v1/batches", list_batches)
    app.router.add_get("/v1/batches/{batch_id}", get_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", cancel_batch)
