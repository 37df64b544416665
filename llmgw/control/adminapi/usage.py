"""The admin API's usage routes: summaries, exports and one request's record.

    GET /api/v1/usage?since=&until=&by=key|project|model   sums per key, project or model
                     [&batch=1]                             of batches' lines only
    GET /api/v1/usage/export?format=csv|jsonl&since=&until= every row, streamed
    GET /api/v1/requests?key=&model=&status=&since=&limit= the latest requests, newest first
    GET /api/v1/requests/{id}                              one request and its decisions, by its
                                                           x-request-id or its answer's id

Times are epoch seconds; `since` defaults to a day ago, `until` to now.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.account import Walls, format_money
from llmgw.accounting import FORMATS, UsageReports, nothing_shown
from llmgw.control.adminapi import PLANE, Refused, _json, within
from llmgw.control.exports import send_export

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


DAY = 86400.0
BY = ("key", "project", "model")
TOTALS = ("requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/usage", summary)
    router.add_get("/api/v1/usage/export", export)
    router.add_get("/api/v1/requests", recent_requests)
    router.add_get("/api/v1/requests/{request_id}", request_record)


def _span(request: web.Request) -> tuple[float, float]:
    now = time.time()
    try:
        since = float(request.query["since"]) if request.query.get("since") else now - DAY
        until = float(request.query["until"]) if request.query.get("until") else now
    except ValueError:
        raise Refused(400, "since and until are times in seconds since the epoch", "invalid_request") from None
    if until < since:
        raise Refused(400, "until is before since; nothing can be in that time", "invalid_request")
    return since, until


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def summary(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    since, until = _span(request)
    by = request.query.get("by", "key")
    if by not in BY:
        raise Refused(400, f'usage is summed by {", ".join(BY)}, not "{by}"', "invalid_request")
    batch_only = request.query.get("batch", "") in ("1", "true")
    groups = await plane.store.usage_summary(since, until, by, batch_only=batch_only,
                                             project_ids=await Walls(plane.store, within(request)).project_ids())
    names = await _names(plane, by, [g["group"] for g in groups])
    for g in groups:
        g["name"], g["project"] = names.get(g["group"], (g["group"], None))
        g["cost"] = format_money(g["cost_micros"])
    total = {name: sum(g[name] for g in groups) for name in TOTALS}
    total["cost"] = format_money(total["cost_micros"])
    # The portal's sentence for the same sums: an empty span, or requests that cost nothing.
    note = nothing_shown(requests=total["requests"], errors=total["errors"], value=total["cost_micros"],
                         metric="cost_micros")
    return _json({"since": since, "until": until, "by": by, "batch": batch_only, "rows": groups, "total": total,
                  "note": note})


async def _names(plane: ControlPlane, by: str, groups: list[str | None]) -> dict[Any, tuple[str, str | None]]:
    """What a person reads for each group: a key's name and project, a project's path."""
    out: dict[Any, tuple[str, str | None]] = {}
    if by == "model":
        return out
    paths: dict[str, str | None] = {}

    async def path_of(project_id: str | None) -> str | None:
        if project_id is None:
            return None
        if project_id not in paths:
            found = await plane.store.project_path(project_id)
            paths[project_id] = None if found is None else str(found)
        return paths[project_id]

    for group in groups:
        if group is None:
            # Requests refused before a key was known (a wrong key, a throttled address).
            out[None] = ("(no key)" if by == "key" else "(no project)", None)
        elif by == "key":
            key = await plane.store.key_by_id(group)
            out[group] = (group, None) if key is None else (key.name, await path_of(key.project_id))
        else:
            shown = await path_of(group)
            out[group] = (shown or group, shown)
    return out


async def export(request: web.Request) -> web.StreamResponse:
    plane: ControlPlane = request.app[PLANE]
    since, until = _span(request)
    fmt = request.query.get("format", "csv")
    if fmt not in FORMATS:
        raise Refused(400, f'exports are csv or jsonl, not "{fmt}"', "invalid_request")
    chunks = UsageReports(plane.store).export(since=since, until=until, fmt=fmt,
                                              project_ids=await Walls(plane.store, within(request)).project_ids())
    # The first page is read before the answer starts, so a store that is
    # away is a 503 with a sentence rather than an empty file.
    first = await anext(chunks)
    response = web.StreamResponse(headers={
        "Content-Type": FORMATS[fmt],
        "Content-Disposition": f'attachment; filename="llmgw-usage.{fmt}"',
    })
    return await send_export(request, response, first, chunks, what="the usage export")


async def request_record(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    request_id = request.match_info["request_id"]
    row = await plane.store.usage_by_id(request_id)
    if row is None and request_id.startswith("msg_"):
        # A Responses answer's message item is msg_<x> where the answer is resp_<x>.
        row = await plane.store.usage_by_id("resp_" + request_id[len("msg_"):])
    if row is None:
        raise Refused(404, f"there is no request {request_id} in the usage records; give the answer's id "
                           "(chatcmpl-…, msg_…, resp_…) or its x-request-id. A request's row is written "
                           "within a second or so of its answer", "not_found")
    view: dict[str, Any] = asdict(row)
    view["time"] = _iso(row.at)
    view["cost"] = format_money(row.cost_micros)
    view["key_name"] = view["project"] = None
    if row.key_id is not None:
        key = await plane.store.key_by_id(row.key_id)
        view["key_name"] = None if key is None else key.name
    if row.project_id is not None:
        path = await plane.store.project_path(row.project_id)
        view["project"] = None if path is None else str(path)
    return _json(view)


# The most rows one listing returns: a tail polls every second, and a person
# reads a screen, not a year (that is `usage export`).
MOST_LISTED = 1000


async def recent_requests(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    query = request.query
    try:
        since = float(query["since"]) if query.get("since") else None
        limit = int(query.get("limit") or 50)
    except ValueError:
        raise Refused(400, "since is a time in seconds since the epoch and limit a whole number",
                      "invalid_request") from None
    if not 1 <= limit <= MOST_LISTED:
        raise Refused(400, f"limit is from 1 to {MOST_LISTED}, not {limit}", "invalid_request")
    status, errors = _status(query.get("status"))
    key_id = await _key_id(plane, query["key"]) if query.get("key") else None
    rows = await plane.store.recent_usage(limit=limit, since=since, key_id=key_id,
                                          model=query.get("model") or None, status=status, errors=errors)
    names: dict[str, str | None] = {}
    out = []
    for row in rows:
        view: dict[str, Any] = asdict(row)
        view["time"] = _iso(row.at)
        view["cost"] = format_money(row.cost_micros)
        if row.key_id is not None and row.key_id not in names:
            key = await plane.store.key_by_id(row.key_id)
            names[row.key_id] = None if key is None else key.name
        view["key_name"] = names.get(row.key_id) if row.key_id else None
        out.append(view)
    return _json({"rows": out})


def _status(text: str | None) -> tuple[int | None, bool]:
    """A status code (429), or "error" for every status of 400 and up."""
    if not text:
        return None, False
    if text in ("error", "errors"):
        return None, True
    if text.isdigit() and 100 <= int(text) <= 599:
        return int(text), False
    raise Refused(400, f'status is a code like 429, or "error" for every refusal and failure; not "{text}"',
                  "invalid_request")


async def _key_id(plane: ControlPlane, given: str) -> str:
    """A key by its id or its name, as people know it."""
    if await plane.store.key_by_id(given) is not None:
        return given
    named = [k for k in await plane.store.list_keys() if k.name == given]
    if not named:
        raise Refused(404, f"there is no key with the id or name {given}; `llmgw keys list` shows them",
                      "not_found")
    if len(named) > 1:
        raise Refused(400, f"{len(named)} keys are named {given} ({', '.join(k.id for k in named)}); "
                           "give the id of the one you mean", "invalid_request")
    return named[0].id
