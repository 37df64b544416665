"""/admin/nodes: each node's cores, memory and cards, what holds each card, and its replicas.

Read through control.catalog.Catalog.nodes and .replicas, what
`llmgw ctl nodes` and `llmgw ctl replicas` show; nothing here changes a node.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.control import GONE, engine_figures
from llmgw.errors import N_
from llmgw.portal.admin.models import STATES
from llmgw.portal.web import PORTAL, Viewer, add_nav, page, render

add_nav("admin", "/admin/nodes", N_("Nodes"), "operator")


def holders(node: dict[str, Any], replicas: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Each card's index -> the replicas that run on it (a replica may span several cards)."""
    held: dict[int, list[dict[str, Any]]] = {g["index"]: [] for g in node.get("gpus") or []}
    for r in replicas:
        if r["node_id"] != node["id"] or r["state"] in GONE:
            continue
        for index in r["gpus"] or []:
            held.setdefault(index, []).append(r)
    return held


@page("/admin/nodes", role="operator")
async def nodes(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    catalog = request.app[PORTAL].catalog()
    found = sorted(await catalog.nodes(), key=lambda n: n["name"])
    replicas = await catalog.replicas()
    # What each ready engine says of its work, read now, as `ctl replicas` shows it (control/engineloads.py).
    await engine_figures(replicas, request.app[PORTAL].engine_key())
    shown = [{"node": n, "cards": holders(n, replicas),
              "replicas": [r for r in replicas if r["node_id"] == n["id"] and r["state"] not in GONE]}
             for n in found]
    return render(request, "admin/nodes.html", title=N_("Nodes"), nodes=shown, states=STATES)
