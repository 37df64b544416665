"""/v1/images/generations answered by a ComfyUI model: OpenAI's request made into the workflow's values, the
pictures answered in OpenAI's shape, as base64 or as files of the caller's project (`response_format: url`)."""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
from aiohttp import web

from llmgw.router.apis.images import IGNORED, size_of
from llmgw.router.batches.keeper import FileKeeper, new_file_id, place_for
from llmgw.router.call import Call, Refuse, changed_headers
from llmgw.router.media import IMAGE_PURPOSE, runs
from llmgw.router.media.inputs import read_file_input
from llmgw.router.plane import ClientPlane
from llmgw.router.registry import ModelEntry
from llmgw.store import StoredFile

# OpenAI's own fields of the request, each read here (or left aside: IGNORED); any other field must be one of the
# workflow's inputs.
_OPENAI = ("model", "prompt", "n", "size", "response_format", "output_format", "stream", *IGNORED)
# Where a picture answered as a URL is kept: a file of the caller's project, for router.jobs.retain_days.
PURPOSE = IMAGE_PURPOSE


def values_of(body: dict[str, Any], flow_inputs: dict[str, Any]) -> dict[str, Any]:
    """The workflow's values from OpenAI's request: size as width and height, n as batch_size, the rest by name."""
    values: dict[str, Any] = {"prompt": body["prompt"]}
    size = size_of(body)
    if size is not None:
        if "width" not in flow_inputs or "height" not in flow_inputs:
            raise Refuse(400, 'this model\'s workflow sets its own size: leave "size" out', "invalid_request",
                         param="size")
        values["width"], values["height"] = size
    n = body.get("n")
    if n is not None and n != 1:
        if "batch_size" not in flow_inputs:
            raise Refuse(400, 'this model\'s workflow makes one picture a run: leave "n" out or send 1',
                         "invalid_request", param="n")
        values["batch_size"] = n
    for key, value in body.items():
        if key in _OPENAI:
            continue
        if key not in flow_inputs:
            raise Refuse(400, f'"{key}" is neither OpenAI\'s nor one of this model\'s inputs '
                              f"({', '.join(sorted(flow_inputs))})", "invalid_request", param=key)
        values[key] = value
    return values


async def answer(plane: ClientPlane, request: web.Request | None, call: Call, entry: ModelEntry) -> web.Response:
    """The pictures `entry` (the model asked, or its fallback) makes for the call."""
    router = plane.router
    settings = plane.settings.current.router
    flow = runs.workflow_of(entry)
    body = call.upstream_body  # as the input guardrails left it: a redacted prompt is what is pictured
    values = values_of(body, flow.inputs)
    keeper = FileKeeper(plane.store, plane.cfg.data_dir)
    most = int(settings.batch.max_file_bytes)
    files = {name: await read_file_input(keeper, call.principal, name, values.pop(name), most)
             for name in flow.file_inputs() if isinstance(values.get(name), str)}
    made = await runs.run(router.session_for(entry), entry, values, files,
                          timeout=float(settings.timeouts.total))
    pictures = [o for o in made.outputs if o.kind == "images" and o.data.startswith(b"\x89PNG")]
    call.endpoint = made.endpoint
    call.images = len(pictures)
    if not pictures:
        raise Refuse(502, f"{entry.name}'s workflow ran and made no picture; its workflow must end in a SaveImage",
                     "upstream_invalid", decided_by="upstream_error")
    data: list[dict[str, Any]] = []
    if body.get("response_format") == "url":
        base = _base_url(plane, request)
        for picture in pictures:
            file_id = await _keep(plane, keeper, call, picture.data)
            data.append({"url": f"{base}/v1/files/{file_id}/content"})
    else:
        data = [{"b64_json": base64.b64encode(p.data).decode()} for p in pictures]
    doc: dict[str, Any] = {"created": int(time.time()), "data": data, "output_format": "png"}
    width, height = made.values.get("width"), made.values.get("height")
    if isinstance(width, int) and isinstance(height, int):
        doc["size"] = f"{width}x{height}"
    if "seed" in made.values:
        doc["seed"] = made.values["seed"]
    media = entry.settings.comfyui
    if media is not None and media.license is not None:
        doc["license"] = media.license.fields()
    call.status = 200
    return web.Response(body=orjson.dumps(doc), content_type="application/json",
                        headers={**changed_headers(call), "x-request-id": call.id})


async def _keep(plane: ClientPlane, keeper: FileKeeper, call: Call, data: bytes) -> str:
    settings = plane.settings.current.router.batch
    file = StoredFile(id=new_file_id(), project_id=call.principal.path.project.id, key_id=call.principal.key.id,
                      purpose=PURPOSE, filename=f"{call.id}.png", bytes=len(data), created_at=time.time(),
                      place=place_for(len(data), int(settings.store_below)))
    await keeper.keep(file, data)
    return file.id


def _base_url(plane: ClientPlane, request: web.Request | None) -> str:
    """The gateway's address as its clients know it: portal.address where set, else what this request used."""
    address = str(plane.settings.current.portal.address or "").rstrip("/").removesuffix("/v1")
    if address:
        return address
    if request is not None:
        return f"{request.scheme}://{request.host}"
    return ""
