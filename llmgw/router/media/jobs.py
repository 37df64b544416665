"""`/v1/workflows` and `/v1/workflows/runs`: a ComfyUI model's workflow run as a job (docs/media.md).

POST makes the job (queued) once its values fit the workflow, its text
passes the input guardrails' patterns and the key is within its limits and
budgets; the leader's runner (jobrunner.py) runs it. GET polls it, or with
`Accept: text/event-stream` (or `?stream=true`) follows its progress. Like
files and batches, a key sees its own project's runs only: another's is
"not here", so ids cannot be probed.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from typing import Any

import orjson
from aiohttp import web

from llmgw.account import Principal
from llmgw.config import FILE_TYPES
from llmgw.engines import WorkflowError
from llmgw.guard import check_input
from llmgw.router.batches.api import metadata_of, own_file
from llmgw.router.batches.keeper import FileKeeper, is_file_id, new_file_id, place_for
from llmgw.router.body import read_json
from llmgw.router.call import Refuse
from llmgw.router.handlers import find_model
from llmgw.router.media import INPUT_PURPOSE, runs
from llmgw.router.media.inputs import read_file_input
from llmgw.router.plane import ClientPlane
from llmgw.router.refusing import refusing
from llmgw.store import ENDED_JOB, OPEN_JOB, Job, StoredFile

_refusals = refusing("workflow runs")
_RUN_ID = re.compile(r"^run_[0-9a-f]{24}$")
STREAM_POLL = 0.5  # seconds between looks at a followed run


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def run_object(job: Job, base: str = "") -> dict[str, Any]:
    """A run as a client reads it."""
    outputs = [{**o, "url": f"{base}/v1/files/{o['file_id']}/content"} for o in job.outputs]
    return {"id": job.id, "object": "workflow.run", "model": job.model, "status": job.status,
            "created_at": int(job.created_at), "started_at": _int(job.started_at), "ended_at": _int(job.ended_at),
            "inputs": job.inputs, "progress": job.progress or None, "outputs": outputs, "error": job.error,
            "metadata": job.metadata, "request_id": job.request_id or None}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _base(request: web.Request, plane: ClientPlane) -> str:
    address = str(plane.settings.current.portal.address or "").rstrip("/").removesuffix("/v1")
    return address or f"{request.scheme}://{request.host}"


def workflow_models(plane: ClientPlane, principal: Principal) -> list[dict[str, Any]]:
    """The models this key may run workflows on, each with its inputs: what the portal's form and the MCP tools
    are made from."""
    out = []
    for name, entry in sorted(plane.router.registry.models.items()):
        media = entry.settings.comfyui
        if media is None or "workflows" not in entry.settings.can or not principal.limits.allows_model(name):
            continue
        try:
            flow = runs.workflow_of(entry)
        except Refuse:
            continue  # a workflow file that cannot be read: the model is not offered until it can
        doc: dict[str, Any] = {"model": name, "workflow": media.workflow, "output": media.output,
                               "inputs": flow.described(), "images": "images" in entry.settings.can,
                               "ready": bool(entry.usable()) or entry.on_demand}
        if media.license is not None:
            doc["license"] = media.license.fields()
        out.append(doc)
    return out


@_refusals
async def list_workflows(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    return _json({"object": "list", "data": workflow_models(plane, principal)})


@_refusals
async def create_run(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    settings = plane.settings.current.router
    body = await read_json(request, int(settings.max_body))
    job = await submit(plane, principal, body)
    return _json(run_object(job, _base(request, plane)))


async def submit(plane: ClientPlane, principal: Principal, body: dict[str, Any]) -> Job:
    """Check a run and make its job; Refuse with what the client should see when it cannot be made. The portal's
    form and the MCP tool make theirs here too."""
    router = plane.router
    settings = plane.settings.current.router
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise Refuse(400, 'the run needs "model": a model with a workflow (GET /v1/workflows lists them)',
                     "invalid_request", param="model")
    entry = find_model(plane, principal, name)
    if entry.settings.comfyui is None or "workflows" not in entry.settings.can:
        raise Refuse(400, f"{name} runs no workflow; GET /v1/workflows lists the models that do",
                     "unsupported_capability", param="model")
    if entry.stopped:
        raise Refuse(503, f"{name} is stopped by an administrator; ask them to start it", "model_stopped",
                     param="model")
    given = body.get("inputs", {})
    if not isinstance(given, dict):
        raise Refuse(400, '"inputs" must be an object of the workflow\'s inputs by name', "invalid_request",
                     param="inputs")
    metadata = metadata_of(body.get("metadata"))
    flow = runs.workflow_of(entry)
    file_names = [k for k in given if k in flow.inputs and flow.inputs[k].type in FILE_TYPES]
    try:
        flow.values({k: v for k, v in given.items() if k not in file_names} | {k: "file" for k in file_names})
    except WorkflowError as e:
        raise Refuse(400, str(e), "invalid_request", param=e.param) from None
    _guard(plane, principal, {k: v for k, v in given.items() if k not in file_names})
    refusal = router.limits.check(principal) or router.budgets.check(principal, time.time())
    if refusal is not None:
        raise Refuse(refusal.status, refusal.message, refusal.code, headers={"Retry-After": str(refusal.retry_after)})
    project = principal.path.project.id
    open_runs = sum(1 for j in await plane.store.open_jobs() if j.project_id == project)
    if open_runs >= settings.jobs.max_open:
        raise Refuse(429, f"this project has {open_runs} runs queued or running, the most it may have "
                          "(router.jobs.max_open); wait for some to end", "too_many_runs",
                     headers={"Retry-After": "10"})
    inputs = dict(given)
    keeper = FileKeeper(plane.store, plane.cfg.data_dir)
    for key in file_names:
        value = inputs[key]
        if not isinstance(value, str):
            raise Refuse(400, f"{key}: expected a file-… id from /v1/files, a data URL or base64", "invalid_request",
                         param=key)
        if is_file_id(value):
            await own_file(plane, principal, value, key)
        else:
            data, filename = await read_file_input(keeper, principal, key, value, int(settings.batch.max_file_bytes))
            inputs[key] = await _keep_input(plane, keeper, principal, filename, data)
    job = Job(id="run_" + secrets.token_hex(12), project_id=project, key_id=principal.key.id,
              person_id=principal.key.person_id, model=name, status="queued", inputs=inputs, created_at=time.time(),
              metadata=metadata)
    await plane.store.add_job(job)
    return job


def _guard(plane: ClientPlane, principal: Principal, typed: dict[str, Any]) -> None:
    """The input policy's patterns on the run's text, at once: a run they would block is refused now, not failed
    later. The judge and the outside services read it when it runs (handlers.serve)."""
    guard = plane.settings.current.guard
    if not guard.enabled or not (guard.default or guard.attach):
        return
    policy = plane.router.guards.effective(guard, plane.settings.version, principal)
    if policy is None:
        return
    result = check_input(policy, {"inputs": typed}, "workflows")
    if result.refusal is not None:
        raise Refuse(result.refusal.status, result.refusal.message, result.refusal.code)


async def _keep_input(plane: ClientPlane, keeper: FileKeeper, principal: Principal, filename: str,
                      data: bytes) -> str:
    settings = plane.settings.current.router.batch
    # Kept as a file of the project, so the job holds its id and not its bytes.
    file = StoredFile(new_file_id(), principal.path.project.id, principal.key.id, INPUT_PURPOSE, filename, len(data),
                      time.time(), place_for(len(data), int(settings.store_below)))
    await keeper.keep(file, data)
    return file.id


async def _own_run(plane: ClientPlane, principal: Principal, run_id: str) -> Job:
    job = await plane.store.job_by_id(run_id) if _RUN_ID.match(run_id) else None
    if job is None or job.project_id != principal.path.project.id:
        raise Refuse(404, f"there is no run {run_id} in this key's project; GET /v1/workflows/runs lists them",
                     "run_not_found")
    return job


@_refusals
async def get_run(request: web.Request, plane: ClientPlane, principal: Principal) -> web.StreamResponse:
    job = await _own_run(plane, principal, request.match_info["run_id"])
    base = _base(request, plane)
    if request.query.get("stream") == "true" or "text/event-stream" in request.headers.get("Accept", ""):
        return await _follow(request, plane, job, base)
    return _json(run_object(job, base))


async def _follow(request: web.Request, plane: ClientPlane, job: Job, base: str) -> web.StreamResponse:
    """Server-sent events: `progress` each time the run moves, then `done` with the run as it ended."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    last: Any = None
    # A client following a run that never ends is let go after the longest a run may take, and a little more.
    until = time.monotonic() + float(plane.settings.current.router.timeouts.total) + 60
    try:
        while True:
            seen = (job.status, job.progress)
            if seen != last:
                last = seen
                event = "done" if job.status in ENDED_JOB else "progress"
                await response.write(b"event: " + event.encode() + b"\ndata: "
                                     + orjson.dumps(run_object(job, base)) + b"\n\n")
            if job.status in ENDED_JOB or time.monotonic() > until:
                break
            await asyncio.sleep(STREAM_POLL)
            fresh = await plane.store.job_by_id(job.id)
            if fresh is None:
                break
            job = fresh
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response


@_refusals
async def list_runs(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    text = request.query.get("limit", "20")
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise Refuse(400, f"limit must be a whole number from 1 to 100, got {text!r}", "invalid_request",
                     param="limit")
    limit = int(text)
    jobs = await plane.store.list_jobs(principal.path.project.id, limit=limit + 1,
                                       after=request.query.get("after") or None,
                                       model=request.query.get("model") or None)
    base = _base(request, plane)
    data = [run_object(j, base) for j in jobs[:limit]]
    return _json({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                  "last_id": data[-1]["id"] if data else None, "has_more": len(jobs) > limit})


@_refusals
async def cancel_run(request: web.Request, plane: ClientPlane, principal: Principal) -> web.Response:
    job = await _own_run(plane, principal, request.match_info["run_id"])
    if job.status in OPEN_JOB:
        await plane.store.move_job(job.id, OPEN_JOB, "cancelled", {"ended_at": time.time()})
    elif job.status != "cancelled":
        raise Refuse(409, f"run {job.id} has {job.status} and can no longer be cancelled", "run_ended")
    return _json(run_object(await _own_run(plane, principal, job.id), _base(request, plane)))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/workflows", list_workflows)
    app.router.add_post("/v1/workflows/runs", create_run)
    app.router.add_get("/v1/workflows/runs", list_runs)
    app.router.add_get("/v1/workflows/runs/{run_id}", get_run)
    app.router.add_post("/v1/workflows/runs/{run_id}/cancel", cancel_run)
