"""The admin API's webhook routes: what `llmgw ctl webhooks` calls.

    GET    /api/v1/webhooks                      the webhooks (whether each signs, never its secret)
    POST   /api/v1/webhooks                      {"url", "events": [...], "format", "secret", "allow_private"}
    DELETE /api/v1/webhooks/{id}                 removes it and what it had pending
    POST   /api/v1/webhooks/{id}/test            sends a test event now; the answer's status
    GET    /api/v1/webhooks/deliveries           ?webhook=ID&state=pending|delivered|failed&limit=N

A tenant administrator's token (docs/people.md) reaches these too: a webhook
they add is of one place they hold ("place": org:NAME or team:ORG/TEAM) and is
sent only that place's events (a budget, a key, a guardrail); they see, test
and remove only such webhooks, and none may reach a private address.

Adding and removing are in the audit log (`webhook.add`, `webhook.remove`,
target webhook:ID), with the URL, the events and whether it signs: the
secret is sealed before anything is written and never put in the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.account import Walls
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body, within
from llmgw.notify import NotifyError

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

_FIELDS = {"url", "events", "format", "secret", "allow_private", "place"}


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/webhooks", hooks_list)
    router.add_post("/api/v1/webhooks", hooks_add)
    router.add_get("/api/v1/webhooks/deliveries", hooks_deliveries)
    router.add_delete("/api/v1/webhooks/{hook_id}", hooks_remove)
    router.add_post("/api/v1/webhooks/{hook_id}/test", hooks_test)


def _refused(e: NotifyError) -> Refused:
    return Refused(e.status, str(e), e.code)


async def _theirs(request: web.Request, place: str) -> bool:
    """Whether the caller may see a webhook of `place`: the cluster's every one, a tenant's those of places held."""
    scope = within(request)
    if scope.cluster:
        return True
    level, _, place_id = place.partition(":")
    return bool(place_id) and await Walls(request.app[PLANE].store, scope).place(level, place_id)


async def _hook_of(request: web.Request) -> str:
    """The path's webhook id, when the caller may see it; a tenant is told of another's as of none."""
    plane: ControlPlane = request.app[PLANE]
    hook_id = request.match_info["hook_id"]
    hook = await plane.store.webhook(hook_id)
    if hook is not None and not await _theirs(request, hook.place):
        raise Refused(404, f"no webhook {hook_id}; llmgw ctl webhooks list shows them", "not_found")
    return hook_id


async def hooks_list(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    return _json({"webhooks": [h for h in await plane.notify.webhooks.all() if await _theirs(request, h["place"])]})


async def hooks_add(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are {', '.join(sorted(_FIELDS))}",
                      "invalid_request")
    url = _field(data, "url", str, required=True)
    scope, place = within(request), _field(data, "place", str) or ""
    if scope.tenant and not place:
        raise Refused(400, "say whose events it is sent (--place), one of the places you administer: "
                           + ", ".join(scope.places), "invalid_request")
    if scope.tenant and _field(data, "allow_private", bool):
        raise Refused(403, "only a cluster administrator lets a webhook reach a private address", "forbidden")
    if place:
        level, place_id, _ = await plane.accounts.people.resolve_place(place, scope)
        if level not in ("org", "team"):
            raise Refused(400, f"a webhook is of an org or a team, not of a {level}", "invalid_request")
        place = f"{level}:{place_id}"
    events = data.get("events")
    if events is not None and (not isinstance(events, list) or not all(isinstance(e, str) for e in events)):
        raise Refused(400, '"events" is a list of event kinds', "invalid_request")
    try:
        view = await plane.notify.webhooks.add(
            url, events=events, format=_field(data, "format", str) or "json", secret=_field(data, "secret", str),
            allow_private=bool(_field(data, "allow_private", bool)), place=place)
    except NotifyError as e:
        raise _refused(e) from None
    await plane.accounts.audit(actor(request), "webhook.add", f"webhook:{view['id']}", None, view)
    return _json({"webhook": view}, 201)


async def hooks_remove(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        view = await plane.notify.webhooks.remove(await _hook_of(request))
    except NotifyError as e:
        raise _refused(e) from None
    await plane.accounts.audit(actor(request), "webhook.remove", f"webhook:{view['id']}", view, None)
    return _json({"webhook": view})


async def hooks_test(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        delivery = await plane.notify.webhooks.test(await _hook_of(request))
    except NotifyError as e:
        raise _refused(e) from None
    return _json({"delivery": delivery})


async def hooks_deliveries(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        raise Refused(400, "limit is a whole number", "invalid_request") from None
    hook_id = request.query.get("webhook") or None
    if within(request).tenant:
        hooks = [h for h in await plane.store.list_webhooks() if await _theirs(request, h.place)]
        if hook_id is not None and hook_id not in {h.id for h in hooks}:
            raise Refused(404, f"no webhook {hook_id}; llmgw ctl webhooks list shows them", "not_found")
        if hook_id is None and not hooks:
            return _json({"deliveries": []})
    try:
        rows = await plane.notify.webhooks.deliveries(hook_id, request.query.get("state") or None,
                                                      max(1, min(limit, 1000)))
    except NotifyError as e:
        raise _refused(e) from None
    if within(request).tenant:
        theirs = {h.id for h in hooks}
        rows = [r for r in rows if r["webhook_id"] in theirs]
    return _json({"deliveries": rows})
