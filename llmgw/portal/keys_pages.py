"""A person's own API keys: list them with their limits and spend, make one, revoke one.

A new key's secret is shown once, in the page that answers the POST which
made it (never in a redirect, a URL, a notice cookie or the audit log, and
with Cache-Control: no-store), because the gateway keeps only its digest.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.account import AccountError
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.member import LEVELS, active, key_rows, max_key_ttl, now, own_key, own_project
from llmgw.portal.web import LANG, PORTAL, Viewer, add_nav, form, page, redirect, render

add_nav("main", "/keys", N_("Keys"), "member")

NAME_MAX = 128


@page("/keys", methods=("GET", "POST"))
async def keys(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None  # a member page: the frame sends the signed-out to /signin
    if request.method == "POST":
        return await _make(request, viewer)
    return await _list(request, viewer)


async def _list(request: web.Request, viewer: Viewer, *, status: int = 200, name: str = "",
                error: str | None = None) -> web.Response:
    portal = request.app[PORTAL]
    at = now(request)
    mine = await portal.store.list_keys(person_id=viewer.person.id)
    rows = await key_rows(portal.store, portal.reports, mine, at)
    rows.sort(key=lambda r: (not r.active, -r.key.created_at))
    return render(request, "keys.html", status=status, title=N_("Keys"), rows=rows,
                  projects=await portal.people.projects_of(viewer.person.id), name=name, error=error, levels=LEVELS)


async def _make(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    portal = request.app[PORTAL]
    posted = await form(request)
    name = posted.get("name", "").strip()
    try:
        path = await own_project(portal, viewer, posted.get("project", ""))
        if not name or len(name) > NAME_MAX:
            raise AccountError(N_("A key needs a name of 1 to 128 characters, so you can tell it from your "
                                  "others."))
        view, secret = await portal.accounts.create_key(
            viewer.actor(), name=name, project=str(path), person_email=viewer.person.email,
            max_key_ttl=max_key_ttl(portal))
    except AccountError as e:
        return await _list(request, viewer, status=e.status, name=name, error=i18n.say(request[LANG], e))
    response = render(request, "key_made.html", status=201, title=N_("Your new key"), key=view, secret=secret,
                      project=str(path))
    # The secret is in this body only: no cache of any kind may keep it, and no Back button may show it again.
    response.headers["Cache-Control"] = "no-store"
    return response


@page("/keys/{key_id}/revoke", methods=("POST",))
async def revoke(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    key = await own_key(portal, viewer, request.match_info["key_id"])
    if active(key, now(request)):
        await portal.accounts.revoke_key(viewer.actor(), key.id)
    # This process forgets the key at once; with workers, the plane tells the others (KeysChanged).
    portal.plane.keys.invalidate(key.id)
    return redirect(request, "/keys", notice=N_("The key is revoked: requests that use it are refused."))
