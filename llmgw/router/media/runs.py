"""One run of a ComfyUI model's workflow on one of its replicas: the values checked, the files uploaded, the
graph sent, the outputs fetched with the model's licence written into each picture.

Shared by /v1/images/generations (images.py) and the workflow jobs
(jobs.py), so a picture made either way is made and marked the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from llmgw.config import ComfyUIModel, to_dict
from llmgw.engines import ComfyClient, ComfyError, Output, Progress, Workflow, WorkflowError, load_workflow
from llmgw.media import is_glb, with_extras, with_text
from llmgw.router import scheduler
from llmgw.router.call import Refuse
from llmgw.router.endpoint import Endpoint
from llmgw.router.registry import ModelEntry

log = logging.getLogger("llmgw.router")

OnProgress = Callable[[Progress], Awaitable[None] | None]
# What a picture carries of where it came from, in its PNG text chunks.
LICENSE_KEY = "license"
SOURCE_KEY = "Source"

_cache: dict[bytes, tuple[float, Workflow]] = {}
# A workflow file is read again when its entry is older than this: an edit on the control plane is in force
# within it, and a run costs no file read.
_REREAD = 10.0


def workflow_of(model: ModelEntry) -> Workflow:
    """The model's workflow, read at most every few seconds; Refuse (503) when its file cannot be used."""
    media = model.settings.comfyui
    assert media is not None
    key = orjson.dumps(to_dict(media), option=orjson.OPT_SORT_KEYS)
    now = time.monotonic()
    held = _cache.get(key)
    if held is not None and now - held[0] < _REREAD:
        return held[1]
    try:
        flow = load_workflow(media)
    except WorkflowError as e:
        raise Refuse(503, f"{model.name}'s workflow cannot be used: {e}; the administrator can fix it with "
                          "`llmgw ctl model add -f FILE`", "workflow_unusable") from None
    _cache[key] = (now, flow)
    if len(_cache) > 256:
        _cache.pop(next(iter(_cache)))
    return flow


@dataclass(frozen=True)
class Made:
    """What a run made, and where."""

    outputs: list[Output]
    endpoint: Endpoint
    values: dict[str, Any]


def license_text(model: str, media: ComfyUIModel) -> dict[str, str]:
    text = {SOURCE_KEY: f"llmgw model {model}"}
    if media.license is not None:
        text[LICENSE_KEY] = orjson.dumps(media.license.fields()).decode()
    return text


def marked(outputs: list[Output], model: str, media: ComfyUIModel) -> list[Output]:
    """The outputs with the model's licence in each: a PNG's text chunks, a GLB's asset.extras. Other files are
    answered with it beside them only."""
    text = license_text(model, media)
    glb_extras: dict[str, Any] = {"source": text[SOURCE_KEY]}
    if media.license is not None:
        glb_extras[LICENSE_KEY] = media.license.fields()
    out = []
    for o in outputs:
        data = o.data
        try:
            if data.startswith(b"\x89PNG\r\n\x1a\n"):
                data = with_text(data, text)
            elif is_glb(data):
                data = with_extras(data, glb_extras)
        except ValueError as e:
            log.warning("the %s %s made could not be marked with its licence: %s", o.filename, model, e)
        out.append(Output(o.node, o.filename, o.subfolder, o.kind, data) if data is not o.data else o)
    return out


async def run(session: aiohttp.ClientSession, entry: ModelEntry, values: Mapping[str, Any],
              files: Mapping[str, tuple[bytes, str]], *, timeout: float,
              on_progress: OnProgress | None = None, pinned: str | None = None) -> Made:
    """Run `entry`'s workflow with `values` (checked against its inputs) and `files` (file inputs' bytes and names)
    on the best of its replicas (or on the endpoint `pinned`, a job runner's choice); Refuse with what a client
    should see when it cannot."""
    media = entry.settings.comfyui
    assert media is not None
    flow = workflow_of(entry)
    try:
        # A file input is checked as given (its bytes are read already) and filled with the replica's name for it.
        checked = flow.values({**{k: v for k, v in values.items() if k not in files}, **{k: k for k in files}})
        checked = {k: v for k, v in checked.items() if k not in files}
    except WorkflowError as e:
        raise Refuse(400, str(e), "invalid_request", param=e.param) from None
    usable = [e for e in entry.usable() if pinned is None or e.id == pinned]
    candidates = [e for e in scheduler.choose(usable, "batch") if scheduler.available(e)]
    if not candidates:
        raise Refuse(503, f"{entry.name} has no replica to run on now; try again shortly", "no_replica",
                     headers={"Retry-After": "5"})
    last: ComfyError | None = None
    for endpoint in candidates[:2]:
        if not scheduler.take(endpoint):
            continue
        endpoint.in_flight += 1
        client = ComfyClient(session, endpoint.url)
        try:
            uploaded = {name: await client.upload_image(data, filename) for name, (data, filename) in files.items()}
            graph = flow.fill(checked, media.checkpoint, uploaded)
            outputs = await client.run(graph, on_progress=on_progress, timeout=timeout)
        except ComfyError as e:
            if e.status == 400:
                endpoint.breaker.success()  # the replica answered: the graph was at fault
                raise Refuse(400, f"{entry.name}'s workflow refused these inputs: {e.message}", "invalid_request",
                             decided_by="engine") from None
            if e.ran:
                # A node failed on these inputs: the replica did its part, and another would fail the same way.
                endpoint.breaker.success()
                raise Refuse(502, f"{entry.name}'s workflow failed: {e.message}", "workflow_failed",
                             decided_by="engine") from None
            endpoint.breaker.failure(e.message)
            last = e
            if e.status == 504:
                break
            continue
        except (aiohttp.ClientError, OSError) as e:
            endpoint.breaker.failure(str(e) or type(e).__name__)
            last = ComfyError(502, f"the replica could not be reached: {type(e).__name__}")
            continue
        finally:
            endpoint.in_flight -= 1
        endpoint.breaker.success()
        return Made(marked(outputs, entry.name, media), endpoint, checked)
    assert last is not None or not candidates
    status = last.status if last is not None else 503
    message = last.message if last is not None else "every replica is busy with its one trial"
    raise Refuse(status, f"{entry.name} could not make it: {message}",
                 "upstream_timeout" if status == 504 else "upstream_error", decided_by="upstream_error")
