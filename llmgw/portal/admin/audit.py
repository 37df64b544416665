"""/admin/audit: the audit log, newest first, 50 a page, filtered by who acted and what they did."""

from __future__ import annotations

import orjson
from aiohttp import web

from llmgw.errors import N_
from llmgw.portal.admin import PER_PAGE, Paging, page_number
from llmgw.portal.web import PORTAL, Viewer, page, render

SHOWN = 2_000  # characters of an entry's before or after: enough to read, not a page of JSON


@page("/admin/audit", role="admin", tenants=True)
async def audit(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    actor = request.query.get("actor", "").strip() or None
    action = request.query.get("action", "").strip() or None
    number = page_number(request)
    # One more than a page says whether there is a next one, without counting the whole log.
    found = await portal.accounts.audit_log(viewer.within, limit=PER_PAGE + 1, actor=actor, action=action,
                                            offset=(number - 1) * PER_PAGE)
    more = len(found) > PER_PAGE
    entries = [
        {"at": e.at, "actor": e.actor, "via": e.via, "action": e.action, "target": e.target,
         "before": _shown(e.before), "after": _shown(e.after)}
        for e in found[:PER_PAGE]
    ]
    paging = Paging(number, PER_PAGE, (number - 1) * PER_PAGE + len(entries) + (1 if more else 0))
    return render(request, "admin/audit.html", title=N_("Audit log"), entries=entries, actor=actor or "",
                  action=action or "", paging=paging, more=more,
                  newer=paging.link(number - 1, "/admin/audit", request.query),
                  older=paging.link(number + 1, "/admin/audit", request.query))


def _shown(doc: object) -> str:
    if doc is None:
        return ""
    text = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= SHOWN else text[:SHOWN] + " …"
