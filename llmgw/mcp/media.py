"""Pictures and workflows as MCP tools (`llmgw ctl mcp add media --url llmgw:media`), answered in the process
serving /mcp, as the caller.

Each tool makes its request of the gateway under the caller's key, through
the path a /v1 request takes (handlers.serve for a picture, the jobs'
submit for a workflow run): the key's models, limits, budgets and
guardrails apply, and it is charged and recorded as any request is. What
it makes is a file of the caller's project, answered by id and URL.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from llmgw.account import Principal
from llmgw.mcp.upstream import Progress
from llmgw.router import IMAGES, FileKeeper, Inside, Refuse, new_request_id, run_object, serve, submit, workflow_models
from llmgw.store import ENDED_JOB

if TYPE_CHECKING:
    from llmgw.router import ClientPlane

WAIT_DEFAULT = 50  # seconds a run_workflow or job_status call waits for the run before answering its id
WAIT_MOST = 600
POLL = 0.5

_TOOLS: list[dict[str, Any]] = [
    {"name": "generate_image", "title": "Make a picture",
     "description": "Makes a picture from a prompt with one of the gateway's picture models, under your key. Answers "
                    "the PNG (as an image), its file_id and url (GET it with your key), its seed and the model's "
                    "licence.",
     "inputSchema": {"type": "object", "properties": {
         "prompt": {"type": "string", "description": "What the picture shows."},
         "model": {"type": "string", "description": "A picture model; list_workflows shows them. Default: the "
                                                    "first this key may use."},
         "size": {"type": "string", "description": "WIDTHxHEIGHT, like 1024x1024."},
         "seed": {"type": "integer", "description": "The same seed makes the same picture."},
         "negative_prompt": {"type": "string", "description": "What it should not show."}},
         "required": ["prompt"], "additionalProperties": False},
     "annotations": {"title": "Make a picture", "readOnlyHint": False, "destructiveHint": False,
                     "idempotentHint": False, "openWorldHint": False}},
    {"name": "run_workflow", "title": "Run a workflow",
     "description": "Runs a ComfyUI model's workflow as a job with the inputs it declares (list_workflows shows "
                    "them; a picture input is a file-… id, a data URL or base64). Waits up to wait_seconds for it, "
                    "then answers its outputs' file ids and urls, or its run id for job_status.",
     "inputSchema": {"type": "object", "properties": {
         "model": {"type": "string", "description": "The workflow's model."},
         "inputs": {"type": "object", "description": "The workflow's inputs by name."},
         "wait_seconds": {"type": "integer", "minimum": 0, "maximum": WAIT_MOST,
                          "description": f"How long to wait for it to end (default {WAIT_DEFAULT})."}},
         "required": ["model"], "additionalProperties": False},
     "annotations": {"title": "Run a workflow", "readOnlyHint": False, "destructiveHint": False,
                     "idempotentHint": False, "openWorldHint": False}},
    {"name": "job_status", "title": "Where a run stands",
     "description": "Where a workflow run stands, and its outputs when it has ended; wait_seconds waits for it.",
     "inputSchema": {"type": "object", "properties": {
         "run_id": {"type": "string", "description": "The run's id (run_…)."},
         "wait_seconds": {"type": "integer", "minimum": 0, "maximum": WAIT_MOST}},
         "required": ["run_id"], "additionalProperties": False},
     "annotations": {"title": "Where a run stands", "readOnlyHint": True, "destructiveHint": False,
                     "idempotentHint": True, "openWorldHint": False}},
    {"name": "list_workflows", "title": "Picture and workflow models",
     "description": "The picture and workflow models this key may use, each with the inputs its workflow takes, "
                    "whether a replica is up now, and its licence.",
     "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
     "annotations": {"title": "Picture and workflow models", "readOnlyHint": True, "destructiveHint": False,
                     "idempotentHint": True, "openWorldHint": False}},
]


class BadArguments(Exception):
    pass


def _text(text: str, data: dict[str, Any], extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}, *(extra or [])], "structuredContent": data, "isError": False}


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class MediaTools:
    """The tools, for one process serving /mcp; `base` is the gateway's address for the files' urls."""

    def __init__(self, plane: ClientPlane) -> None:
        self.plane = plane

    async def list_tools(self) -> list[dict[str, Any]]:
        return [dict(t) for t in _TOOLS]

    async def call_tool(self, name: str, arguments: dict[str, Any], progress: Progress | None = None,
                        caller: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Upstream's call, which carries no key: the gateway calls call_as instead, with the caller's."""
        return _error("the media tools are called as a key, through /mcp")

    async def call_as(self, principal: Principal, name: str, arguments: dict[str, Any],
                      progress: Progress | None) -> dict[str, Any]:
        try:
            if name == "generate_image":
                return await self._image(principal, arguments)
            if name == "run_workflow":
                return await self._run(principal, arguments, progress)
            if name == "job_status":
                return await self._status(principal, arguments, progress)
            if name == "list_workflows":
                models = workflow_models(self.plane, principal)
                lines = [f"{m['model']}: {m['workflow']} ({', '.join(sorted(m['inputs']))})" for m in models]
                return _text("\n".join(lines) or "no picture or workflow model is offered to this key", {
                    "models": models})
            return _error(f'there is no media tool "{name}"; the tools are '
                          f"{', '.join(t['name'] for t in _TOOLS)}")
        except BadArguments as e:
            return _error(str(e))
        except Refuse as e:
            return _error(e.message)

    def _base(self) -> str:
        return str(self.plane.settings.current.portal.address or "").rstrip("/").removesuffix("/v1")

    async def _image(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        prompt = arguments.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadArguments("generate_image needs prompt: the text of what to picture")
        model = arguments.get("model")
        if model is None:
            pictures = [m["model"] for m in workflow_models(self.plane, principal) if m["images"]]
            if not pictures:
                raise BadArguments("this key may use no picture model")
            model = pictures[0]
        body: dict[str, Any] = {"model": model, "prompt": prompt, "response_format": "url"}
        for key in ("size", "seed", "negative_prompt"):
            if key in arguments:
                body[key] = arguments[key]
        band = principal.key.band
        inside = Inside(body=body, profile="batch", band=band)
        response = await serve(self.plane, IMAGES, principal, new_request_id(), None, inside)
        raw = getattr(response, "body", b"")
        answer = orjson.loads(raw) if isinstance(raw, (bytes, bytearray)) and raw else {}
        if response.status >= 400:
            error = answer.get("error") or {}
            return _error(str(error.get("message") or f"the picture was refused ({response.status})"))
        pictures = answer.get("data") or []
        made = []
        images: list[dict[str, Any]] = []
        for picture in pictures:
            url = str(picture.get("url") or "")
            file_id = url.rpartition("/v1/files/")[2].partition("/")[0]
            made.append({"file_id": file_id, "url": url})
            file = await self.plane.store.file_by_id(file_id)
            if file is not None and file.bytes <= 4 * 1024 * 1024:
                png = await FileKeeper(self.plane.store, self.plane.cfg.data_dir).read(file)
                if png is not None:
                    images.append({"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"})
        data = {"model": model, "pictures": made, "seed": answer.get("seed"), "license": answer.get("license")}
        lines = [f"{p['file_id']}: {p['url']}" for p in made]
        return _text("Made " + ("\n".join(lines) if lines else "nothing"), data, images)

    async def _run(self, principal: Principal, arguments: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
        wait = _wait(arguments)
        job = await submit(self.plane, principal, {"model": arguments.get("model"),
                                                   "inputs": arguments.get("inputs") or {}})
        return await self._answer(principal, job.id, wait, progress)

    async def _status(self, principal: Principal, arguments: dict[str, Any],
                      progress: Progress | None) -> dict[str, Any]:
        run_id = arguments.get("run_id")
        if not isinstance(run_id, str):
            raise BadArguments("job_status needs run_id: a run's id (run_…)")
        return await self._answer(principal, run_id, _wait(arguments), progress)

    async def _answer(self, principal: Principal, run_id: str, wait: int,
                      progress: Progress | None) -> dict[str, Any]:
        until = time.monotonic() + wait
        seen: Any = None
        while True:
            job = await self.plane.store.job_by_id(run_id)
            if job is None or job.project_id != principal.path.project.id:
                raise BadArguments(f"there is no run {run_id} in this key's project")
            if progress is not None and job.progress and job.progress != seen:
                seen = job.progress
                p = job.progress
                await progress({"progress": p.get("value", 0), "total": p.get("max") or None,
                                "message": f"{job.status}: node {p.get('node')}"})
            if job.status in ENDED_JOB or time.monotonic() >= until:
                break
            await asyncio.sleep(POLL)
        run = run_object(job, self._base())
        if job.status == "succeeded":
            lines = [f"{o['file_id']} ({o['content_type']}, {o['bytes']} bytes): {o['url']}" for o in run["outputs"]]
            return _text(f"Run {job.id} succeeded:\n" + "\n".join(lines), run)
        if job.status in ("failed", "cancelled"):
            error = job.error or {}
            return {**_text(f"Run {job.id} {job.status}: {error.get('message', '')}".rstrip(": "), run),
                    "isError": True}
        return _text(f"Run {job.id} is {job.status}; ask job_status with run_id {job.id} for its end", run)


def _wait(arguments: dict[str, Any]) -> int:
    wait = arguments.get("wait_seconds", WAIT_DEFAULT)
    if not isinstance(wait, int) or isinstance(wait, bool) or not 0 <= wait <= WAIT_MOST:
        raise BadArguments(f"wait_seconds is a whole number from 0 to {WAIT_MOST}")
    return wait
