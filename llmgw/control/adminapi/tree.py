"""The tenancy tree in the admin API: what `llmgw ctl tree` calls.

    GET  /api/v1/tree     every org, its teams and their projects, each with its own limits
    POST /api/v1/tree     {kind: org|team|project, path: ORG[/TEAM[/PROJECT]]}: make one place

Both go through llmgw.account.Places; a place made is audited as "<kind>.create".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from llmgw.account import Places
from llmgw.control.adminapi import PLANE, _field, _json, actor, body, within

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane


def _places(request: web.Request) -> Places:
    plane: ControlPlane = request.app[PLANE]
    return Places(plane.store, plane.accounts.audit)


async def tree_get(request: web.Request) -> web.Response:
    return _json({"orgs": await _places(request).tree(within(request))})


async def tree_add(request: web.Request) -> web.Response:
    data = await body(request)
    made = await _places(request).create(actor(request), _field(data, "kind", str, True),
                                         _field(data, "path", str, True), within(request))
    return _json(made, 201)


def register(r: web.UrlDispatcher) -> None:
    r.add_get("/api/v1/tree", tree_get)
    r.add_post("/api/v1/tree", tree_add)
