"""The admin API's webhook routes: what `llmgw ctl webhooks` calls.

    GET    /api/v1/webhooks                      the webhooks (whether each signs, never its secret)
    POST   /api/v1/webhooks                      {"url", "events": [...], "format", "secret", "allow_private"}
    DELETE /api/v1/webhooks/{id}                 removes it and what it had pending
    POST   /api/v1/webhooks/{id}/test            sends a test event now; the answer's status
    GET    /api/v1/webhooks/deliveries           ?webhook=ID&state=pending|delivered|failed&limit=N

Adding and removing are in the audit log (`webhook.add`, `webhook.remove`,
target webhook:ID), with the URL, the events and whether it signs: the
secret is sealed before anything is written and never put in the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.notify import NotifyError

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

_FIELDS = {"url", "events", "format", "secret", "allow_private"}


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/webhooks", hooks_list)
    router.add_post("/api/v1/webhooks", hooks_add)
    router.add_get("/api/v1/webhooks/deliveries", hooks_deliveries)
    router.add_delete("/api/v1/webhooks/{hook_id}", hooks_remove)
    router.add_post("/api/v1/webhooks/{hook_id}/test", hooks_test)


def _refused(e: NotifyError) -> Refused:
    return Refused(e.status, str(e), e.code)


async def hooks_list(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    return _json({"webhooks": await plane.notify.webhooks.all()})


async def hooks_add(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are {', '.join(sorted(_FIELDS))}",
                      "invalid_request")
    url = _field(data, "url", str, required=True)
    events = data.get("events")
    if events is not None and (not isinstance(events, list) or not all(isinstance(e, str) for e in events)):
        raise Refused(400, '"events" is a list of event kinds', "invalid_request")
    try:
        view = await plane.notify.webhooks.add(
            url, events=events, format=_field(data, "format", str) or "json", secret=_field(data, "secret", str),
            allow_private=bool(_field(data, "allow_private", bool)))
    except NotifyError as e:
        raise _refused(e) from None
    await plane.accounts.audit(actor(request), "webhook.add", f"webhook:{view['id']}", None, view)
    return _json({"webhook": view}, 201)


async def hooks_remove(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        view = await plane.notify.webhooks.remove(request.match_info["hook_id"])
    except NotifyError as e:
        raise _refused(e) from None
    await plane.accounts.audit(actor(request), "webhook.remove", f"webhook:{view['id']}", view, None)
    return _json({"webhook": view})


async def hooks_test(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        delivery = await plane.notify.webhooks.test(request.match_info["hook_id"])
    except NotifyError as e:
        raise _refused(e) from None
    return _json({"delivery": delivery})


async def hooks_deliveries(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise Refused(400, "limit is a whole number", "invalid_request") from None
    try:
        rows = await plane.notify.webhooks.deliveries(request.query.get("webhook") or None,
                                                      request.query.get("state") or None, max(1, min(limit, 1000)))
    except NotifyError as e:
        raise _refused(e) from None
    return _json({"deliveries": rows})
