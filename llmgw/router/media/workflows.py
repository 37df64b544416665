"""One workflow job's run, inside the router: its values and files to the replica, what it made kept as files of the
job's project, and the answer the job runner records: {"outputs": [...], "values": {...}}."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from llmgw.router.batches.keeper import FileKeeper, new_file_id, place_for
from llmgw.router.call import Call, Refuse
from llmgw.router.media import OUTPUT_PURPOSE, runs
from llmgw.router.media.inputs import read_file_input
from llmgw.router.plane import ClientPlane
from llmgw.router.registry import ModelEntry
from llmgw.store import StoredFile

# The purpose of a file a workflow made: listed with the project's other files, deleted with its run.
PURPOSE = OUTPUT_PURPOSE
_SUFFIX = {b"\x89PNG\r\n\x1a\n": "image/png", b"glTF": "model/gltf-binary"}


async def answer(plane: ClientPlane, call: Call, entry: ModelEntry) -> web.Response:
    settings = plane.settings.current.router
    body = call.upstream_body
    keeper = FileKeeper(plane.store, plane.cfg.data_dir)
    most = int(settings.batch.max_file_bytes)
    given = body.get("files") or {}
    files = {name: await read_file_input(keeper, call.principal, name, value, most)
             for name, value in given.items() if isinstance(value, str)}
    made = await runs.run(plane.router.session_for(entry), entry, dict(body.get("inputs") or {}), files,
                          timeout=float(settings.timeouts.total), on_progress=call.on_progress, pinned=call.pinned)
    call.endpoint = made.endpoint
    if not made.outputs:
        raise Refuse(502, f"{entry.name}'s workflow ran and made nothing; it must end in a node that saves its "
                          "result (SaveImage)", "upstream_invalid", decided_by="upstream_error")
    media = entry.settings.comfyui
    pictures = sum(1 for o in made.outputs if o.data.startswith(b"\x89PNG"))
    if media is not None and media.output == "pictures":
        call.images = pictures
    outputs: list[dict[str, Any]] = []
    for o in made.outputs:
        file_id = await _keep(plane, keeper, call, o.filename, o.data)
        kind = next((k for sig, k in _SUFFIX.items() if o.data.startswith(sig)), "application/octet-stream")
        outputs.append({"file_id": file_id, "filename": o.filename, "kind": o.kind, "content_type": kind,
                        "bytes": len(o.data), "node": o.node})
    call.status = 200
    doc = {"outputs": outputs, "values": {k: v for k, v in made.values.items() if k not in files}}
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


async def _keep(plane: ClientPlane, keeper: FileKeeper, call: Call, filename: str, data: bytes) -> str:
    settings = plane.settings.current.router.batch
    file = StoredFile(id=new_file_id(), project_id=call.principal.path.project.id, key_id=call.principal.key.id,
                      purpose=PURPOSE, filename=filename, bytes=len(data), created_at=time.time(),
                      place=place_for(len(data), int(settings.store_below)))
    await keeper.keep(file, data)
    return file.id
