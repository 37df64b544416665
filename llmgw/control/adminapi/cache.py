"""The admin API's answer cache routes: a project's setting, what `llmgw keys cache` calls.

    GET /api/v1/cache?project=ORG/TEAM/PROJECT   the setting (off when never set)
    PUT /api/v1/cache                            {"project", "ttl": "24h", "similar": 0.95 | null}
                                                 or {"project", "off": true}

Every change is in the audit log (`cache.set`, target project:ID) with the
setting before and after, as limits are. Only the setting is in the store;
the answers are in each gateway's memory (docs/cache.md).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.config import Duration
from llmgw.control.adminapi import PLANE, Refused, _field, _json, actor, body
from llmgw.store import ProjectCache

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

# Below a second an answer would expire before a client could ask again; a
# TTL that short is a typo for something longer.
SHORTEST_TTL = 1.0


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/cache", cache_get)
    router.add_put("/api/v1/cache", cache_put)


def view(setting: ProjectCache | None) -> dict[str, Any]:
    """A setting as the CLI and the audit log show it; never set reads as off."""
    if setting is None:
        return {"enabled": False, "ttl": None, "ttl_text": None, "similar": None, "updated_at": None}
    return {"enabled": setting.enabled, "ttl": setting.ttl, "ttl_text": str(Duration(setting.ttl)),
            "similar": setting.similar, "updated_at": setting.updated_at}


async def _project(plane: ControlPlane, ident: str | None) -> tuple[str, str]:
    if not ident:
        raise Refused(400, '"project" is required: ORG/TEAM/PROJECT or a project id', "invalid_request")
    project_id, _ = await plane.accounts.resolve_scope("project", ident)
    path = await plane.store.project_path(project_id)
    return project_id, str(path) if path else project_id


async def cache_get(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    project_id, path = await _project(plane, request.query.get("project"))
    setting = await plane.store.get_project_cache(project_id)
    return _json({"project": path, "project_id": project_id, "cache": view(setting)})


async def cache_put(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    off = _field(data, "off", bool) or False
    ttl_text = _field(data, "ttl", str)
    similar = data.get("similar")
    if similar is not None and (isinstance(similar, bool) or not isinstance(similar, (int, float))):
        raise Refused(400, "--similar is a cosine similarity between 0 and 1, like 0.95", "invalid_request")
    unknown = sorted(set(data) - {"project", "ttl", "similar", "off"})
    if unknown:
        raise Refused(400, f"unknown field {', '.join(unknown)}; the fields are project, ttl, similar and off",
                      "invalid_request")
    if off and (ttl_text is not None or similar is not None):
        raise Refused(400, "--off, or --ttl with --similar: not both", "invalid_request")
    if not off and ttl_text is None:
        if similar is not None:
            raise Refused(400, "--similar goes with --ttl: say how long answers are reused", "invalid_request")
        raise Refused(400, "say how long answers are reused with --ttl (like 24h), or stop with --off",
                      "invalid_request")
    if similar is not None and not (math.isfinite(similar) and 0 <= similar <= 1):
        raise Refused(400, f"--similar is a cosine similarity between 0 and 1, like 0.95; got {similar}",
                      "invalid_request")
    if similar == 0:
        raise Refused(400, "--similar 0 would give every question of a conversation the first answer given "
                           "there; a threshold like 0.8 reuses answers to rewordings only", "invalid_request")
    ttl = 0.0  # read only without --off, which needs --ttl (above), so it is always parsed then
    if ttl_text is not None:
        try:
            ttl = float(Duration.parse(ttl_text))
        except ValueError as e:
            raise Refused(400, f"--ttl: {e}", "invalid_request") from None
        if ttl < SHORTEST_TTL:
            raise Refused(400, f"--ttl is how long an answer is reused, at least 1s; got {ttl_text}",
                          "invalid_request")
    project_id, path = await _project(plane, _field(data, "project", str))
    before = await plane.store.get_project_cache(project_id)
    now = time.time()
    if off:
        # Off keeps the last TTL and threshold on record: turning it on
        # again is then one look at `llmgw keys cache` away.
        after = ProjectCache(project_id, ttl=before.ttl if before else 0.0,
                             similar=before.similar if before else None, enabled=False, updated_at=now)
    else:
        after = ProjectCache(project_id, ttl=ttl, similar=None if similar is None else float(similar),
                             enabled=True, updated_at=now)
    await plane.store.put_project_cache(after)
    await plane.accounts.audit(actor(request), "cache.set", f"project:{project_id}", view(before), view(after))
    return _json({"project": path, "project_id": project_id, "cache": view(after)})
