"""A request for a catalog model with no replica ready waits for one to load, and says so.

An on-demand model (`scaling.on_demand`) runs nothing until a request asks
for it. The request's ask reaches placement through the router's
DemandRecord, the leader starts a replica, and the request is routed as
usual once that replica is in the registry — within `router.timeouts.load`.

A streamed request gets its headers at once (with `x-llmgw-loading: MODEL`)
and an SSE comment every COMMENT_EVERY seconds while it waits: the openai
and anthropic SDKs skip comment lines, a proxy does not cut a connection
that is not silent, and a person reading the stream sees why nothing comes
yet. A request that is not streamed just waits; its answer carries the
header. From the moment a stream has begun, a refusal can no longer be a
status: it is the stream's error event, in the client's API shape.

A model an administrator stopped is refused at once: waiting would not
bring it back. So is a catalog model that is not on demand, has nothing
loading, and placement says cannot be placed.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.config import Duration
from llmgw.router.apis import by_api
from llmgw.router.call import Call, Refuse, changed_headers

if TYPE_CHECKING:
    from llmgw.router.registry import Registry
    from llmgw.router.service import Router

LOADING_HEADER = "x-llmgw-loading"
COMMENT_EVERY = 5.0  # seconds between `: waiting` comments; proxies commonly cut a stream silent for 60
RETRY_AFTER = "30"
NO_REPLICA_RETRY = "5"  # a replica's agent reports it within a heartbeat or two
CLIENT_GONE = 499


def stopped(name: str) -> Refuse:
    return Refuse(503, f"{name} is stopped by an administrator and takes no requests until it is started again",
                  "model_stopped")


async def until_ready(router: Router, request: web.Request | None, call: Call, load: Duration) -> bool:
    """Wait for the call's model to have a replica, when it is a catalog model that must load first.

    Returns True when it waited (the call's model is then the registry's
    fresh entry, with its replicas); False when there was nothing to wait
    for. Raises Refuse for a stopped model, or a wait past `load`. `request`
    is None for a request made inside the gateway (a batch's line), which
    is never streamed and has no client to leave.
    """
    entry = call.model
    catalog = entry.catalog
    if not catalog:
        return False
    demand, registry = router.demand, router.registry
    demand.used(catalog)
    if entry.stopped:
        raise stopped(entry.name)
    if entry.usable():
        demand.loaded(catalog)
        return False
    if not entry.on_demand and catalog not in registry.loading:
        why = registry.waits.get(catalog)
        if why:
            raise Refuse(503, f"{entry.name} has no replica ready: {why}", "no_capacity",
                         headers={"Retry-After": RETRY_AFTER}, decided_by="placement")
        if not entry.endpoints:
            # In the catalog, with nothing placed or loading that this router knows of: a leader that
            # has just taken over and is hearing from its nodes, a node being replaced. Never "not here".
            raise Refuse(503, f"{entry.name} has no replica ready: {_why(catalog, registry)}; try again shortly",
                         "no_replica", headers={"Retry-After": NO_REPLICA_RETRY}, decided_by="placement")
        return False  # routed on: its replicas are passed over (breakers), the usual refusal
    started = time.monotonic()
    deadline = started + float(load)
    with demand.asking(catalog):
        if call.stream and request is not None:
            call.prepared = await _begin_stream(request, call, registry)
        said = time.monotonic()
        while (left := deadline - time.monotonic()) > 0:
            changed = registry.changed()
            try:
                await asyncio.wait_for(changed.wait(), min(left, COMMENT_EVERY))
            except TimeoutError:
                pass
            fresh = registry.model(entry.name)
            if fresh is None:
                raise Refuse(404, f"{entry.name} was removed from the catalog while this request waited for it to "
                                  "load", "model_not_found", param="model")
            if fresh.stopped:
                raise stopped(entry.name)
            if fresh.usable():
                demand.loaded(catalog)
                call.model = fresh
                call.load_wait = time.monotonic() - started
                return True
            if call.prepared is None:
                if request is not None and (request.transport is None or request.transport.is_closing()):
                    raise Refuse(CLIENT_GONE, "the client left while its model loaded", "client_gone")
            elif time.monotonic() - said >= COMMENT_EVERY:
                said = time.monotonic()
                try:
                    await call.prepared.write(_comment(entry.name, catalog, registry))
                except ConnectionResetError:
                    raise Refuse(CLIENT_GONE, "the client left while its model loaded", "client_gone") from None
    call.load_wait = time.monotonic() - started
    raise Refuse(503, f"{entry.name} did not load within router.timeouts.load ({load}): {_why(catalog, registry)}; "
                      "try again later", "model_not_loaded",
                 headers={"Retry-After": RETRY_AFTER, LOADING_HEADER: entry.name}, decided_by="timeout")


def _why(catalog: str, registry: Registry) -> str:
    why = registry.waits.get(catalog)
    if why:
        return why
    where = registry.loading.get(catalog)
    if where:
        return f"it is still loading {where}"
    return (f"no replica of it is ready that this control plane knows of (an administrator can see why with "
            f"`llmgw ctl replicas --model {catalog}` and `llmgw ctl explain-placement {catalog}`)")


def _comment(name: str, catalog: str, registry: Registry) -> bytes:
    where = registry.loading.get(catalog)
    if where:
        text = f"loading {name} {where}"
    else:
        why = registry.waits.get(catalog)
        text = f"waiting for {name} to load" + (f": {why}" if why else "")
    # One line: a newline inside would end the comment and start a field.
    return b": " + " ".join(text.split()).encode() + b"\n\n"


async def _begin_stream(request: web.Request, call: Call, registry: Registry) -> web.StreamResponse:
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        **changed_headers(call), "x-request-id": call.id, LOADING_HEADER: call.model.name})
    await response.prepare(request)
    try:
        await response.write(_comment(call.model.name, call.model.catalog, registry))
    except ConnectionResetError:
        raise Refuse(CLIENT_GONE, "the client left while its model loaded", "client_gone") from None
    return response


async def refuse_in_stream(call: Call, refused: Refuse) -> web.StreamResponse:
    """A refusal after the stream began (its status is already 200): the API's own error event, then the end."""
    response = call.prepared
    assert response is not None  # the caller's condition: the stream began
    status, message, code = refused.status, refused.message, refused.code
    event = by_api(call.api).stream_refusal(call, status, message, code)
    try:
        await response.write(event)
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response
