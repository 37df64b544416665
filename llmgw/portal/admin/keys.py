"""/admin/keys: every key, 50 a page, with its project, its holder and its month's spend; revoke one."""

from __future__ import annotations

import time

from aiohttp import web

from llmgw.account import AccountError, Walls, key_view
from llmgw.accounting import period_start
from llmgw.errors import N_
from llmgw.portal import i18n, security
from llmgw.portal.admin import PER_PAGE, Paging, page_number
from llmgw.portal.web import LANG, PORTAL, Viewer, form, page, redirect, render

DAY = 86_400


@page("/admin/keys", role="admin", tenants=True)
async def keys(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    store = portal.store
    if viewer.tenant:
        # A tenant's keys are read whole and paged here: tens or hundreds, where the cluster's are paged
        # by the store.
        walls = Walls(store, viewer.within)
        theirs = [k for k in await store.list_keys() if await walls.project(k.project_id)]
        paging = Paging(page_number(request), PER_PAGE, len(theirs))
        listed = theirs[paging.offset:paging.offset + PER_PAGE]
    else:
        paging = Paging(page_number(request), PER_PAGE, await store.count_keys())
        listed = await store.list_keys(limit=PER_PAGE, offset=paging.offset)
    # A page costs the same few reads however many keys it holds: names of the tree and of the people
    # in one read each, and one spend_by_keys for the page's keys.
    orgs = {o.id: o.name for o in await store.list_orgs()}
    teams = {t.id: (orgs.get(t.org_id, "?"), t.name) for t in await store.list_teams()}
    projects = {p.id: "/".join((*teams.get(p.team_id, ("?", "?")), p.name)) for p in await store.list_projects()}
    people = {p.id: p.email for p in await store.list_people()}
    now = time.time()
    spent = await store.spend_by_keys([k.id for k in listed], int(period_start("month", now) // DAY))
    rows = []
    for key in listed:
        view = key_view(key, None, now)
        view.update(project=projects.get(key.project_id, key.project_id),
                    holder=people.get(key.person_id or "", ""), spent=spent.get(key.id, 0))
        rows.append(view)
    return render(request, "admin/keys.html", title=N_("All keys"), keys=rows, paging=paging,
                  here=request.path_qs, newer=paging.link(paging.number - 1, "/admin/keys", request.query),
                  older=paging.link(paging.number + 1, "/admin/keys", request.query))


@page("/admin/keys/{key_id}/revoke", methods=("POST",), role="admin", tenants=True)
async def revoke(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    back = security.local_path((await form(request)).get("back"), "/admin/keys")
    try:
        view = await portal.accounts.revoke_key(viewer.actor(), request.match_info["key_id"], viewer.within)
    except AccountError as e:
        return redirect(request, back, notice=i18n.say(request[LANG], e))
    portal.plane.keys.invalidate(view["id"])  # refused at once here, not at the cache's next look
    return redirect(request, back, notice=N_("The key was revoked."))
