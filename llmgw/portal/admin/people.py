"""/admin/people: add people, set their role, suspend or lift, reset a password, and their places."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from llmgw.account import ROLES, AccountError, People
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Viewer, form, page, redirect, render

ROLE_NAMES = {"admin": N_("admin"), "operator": N_("operator"), "member": N_("member")}


@page("/admin/people", methods=("GET", "POST"), role="admin", tenants=True)
async def people(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    added = {"email": "", "name": "", "role": "member", "place": ""}
    error = None
    if request.method == "POST":
        posted = await form(request)
        added = {k: posted.get(k, "").strip() for k in added}
        place = added["place"]
        try:
            view, made = await portal.people.add(
                viewer.actor(), email=added["email"], name=added["name"], role=added["role"] or "member",
                member_of=[place] if place else [], within=viewer.within)
        except AccountError as e:
            error = i18n.say(request[LANG], e)
        else:
            if made is None:
                return redirect(request, f"/admin/people/{view['id']}", notice=N_("The person was added."))
            return _password_shown_once(request, view, made, N_("The person was added."))
    listed = await portal.people.list(viewer.within)
    return render(request, "admin/people.html", status=400 if error else 200, title=N_("People"),
                  people=listed, roles=_roles(viewer), role_names=ROLE_NAMES, added=added, error=error,
                  places=viewer.within.places)


@page("/admin/people/{ident}", role="admin", tenants=True)
async def person(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    shown = await portal.people.show(request.match_info["ident"], viewer.within)
    return render(request, "admin/person.html", title=N_("A person"), person=shown, roles=_roles(viewer),
                  role_names=ROLE_NAMES)


def _roles(viewer: Viewer) -> tuple[str, ...]:
    """The roles the page offers: a tenant administrator adds members, and changes no one's role."""
    return ("member",) if viewer.tenant else ROLES


@page("/admin/people/{ident}/role", methods=("POST",), role="admin")
async def set_role(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    posted = await form(request)
    return await _change(request, N_("The role was changed."),
                         lambda people, ident: people.set_role(viewer.actor(), ident, posted.get("role", "")))


@page("/admin/people/{ident}/suspend", methods=("POST",), role="admin", tenants=True)
async def suspend(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    lift = (await form(request)).get("lift") == "1"
    done = N_("The suspension was lifted.") if lift else N_("The person was suspended and signed out everywhere.")
    return await _change(request, done,
                         lambda people, ident: people.suspend(viewer.actor(), ident, lift=lift,
                                                              within=viewer.within))


@page("/admin/people/{ident}/places", methods=("POST",), role="admin", tenants=True)
async def places(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    posted = await form(request)
    place, leave = posted.get("place", "").strip(), posted.get("leave") == "1"
    if leave:
        return await _change(request, N_("They left that place."),
                             lambda people, ident: people.leave(viewer.actor(), ident, place, viewer.within))
    return await _change(request, N_("They joined that place."),
                         lambda people, ident: people.join(viewer.actor(), ident, place, viewer.within))


@page("/admin/people/{ident}/administer", methods=("POST",), role="admin", tenants=True)
async def administer(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """Make the person an org's or a team's administrator, or no longer (People.administer says who may)."""
    assert viewer is not None
    posted = await form(request)
    place, remove = posted.get("place", "").strip(), posted.get("remove") == "1"
    done = N_("They no longer administer that place.") if remove else N_("They administer that place now.")
    return await _change(request, done, lambda people, ident: people.administer(
        viewer.actor(), ident, place, remove=remove, within=viewer.within))


@page("/admin/people/{ident}/link", methods=("POST",), role="admin")
async def link(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """A directory's identity tied on purpose, as `llmgw people link` does (DirectoryAccounts.link)."""
    assert viewer is not None
    posted = await form(request)
    source, subject = posted.get("source", "").strip(), posted.get("subject", "").strip()
    portal = request.app[PORTAL]
    return await _change(request, N_("The directory's identity is tied to this person."),
                         lambda people, ident: portal.directory.link(viewer.actor(), ident, source, subject))


@page("/admin/people/{ident}/reset-password", methods=("POST",), role="admin", tenants=True)
async def reset_password(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    ident = request.match_info["ident"]
    try:
        view, made = await portal.people.reset_password(viewer.actor(), ident, viewer.within)
    except AccountError as e:
        return redirect(request, f"/admin/people/{ident}", notice=i18n.say(request[LANG], e))
    return _password_shown_once(request, view, made, N_("The password was reset; every session of theirs ended."))


async def _change(request: web.Request, done: str,
                  change: Callable[[People, str], Awaitable[object]]) -> web.StreamResponse:
    """Run one change to the person in the path, then back to their page with a sentence saying how it went."""
    portal = request.app[PORTAL]
    ident = request.match_info["ident"]
    try:
        await change(portal.people, ident)
    except AccountError as e:
        return redirect(request, f"/admin/people/{ident}", notice=i18n.say(request[LANG], e))
    return redirect(request, f"/admin/people/{ident}", notice=done)


def _password_shown_once(request: web.Request, view: dict[str, Any], password: str, done: str) -> web.StreamResponse:
    # In this answer only (no-store, as every signed-in page): never in a URL, a notice cookie or the audit log.
    return render(request, "admin/password.html", title=N_("A password made once"), person=view,
                  password=password, done=done)
