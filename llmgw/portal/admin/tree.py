"""/admin/tree: orgs, their teams and projects, made here, with the limits and budget of each level."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from llmgw.account import AccountError, Places, format_money, parse_money
from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Portal, Viewer, form, page, redirect, render
from llmgw.store import Limits

KINDS = ("org", "team", "project")
PERIODS = ("month", "day")
# The templates say these words through _(kind) and _(period); marked here so that they are extracted.
WORDS = (N_("org"), N_("team"), N_("project"), N_("key"), N_("month"), N_("day"))


@page("/admin/tree", methods=("GET", "POST"), role="admin", tenants=True)
async def tree(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    made = {"kind": "project", "path": "", "budget": "", "period": "month"}
    error = None
    if request.method == "POST":
        posted = await form(request)
        made = {k: posted.get(k, "").strip() for k in made}
        try:
            place = await Places(portal.store, portal.accounts.audit).create(
                viewer.actor(), made["kind"], made["path"], viewer.within)
            if made["budget"]:
                await portal.accounts.set_limits(viewer.actor(), place["kind"], place["id"], {
                    "budget_micros": parse_money(made["budget"]),
                    "period": made["period"] if made["period"] in PERIODS else "month"}, within=viewer.within)
                portal.plane.keys.clear()  # a budget is in every cached key's chain below it
        except ExpectedError as e:
            error = i18n.say(request[LANG], e)
        else:
            return redirect(request, "/admin/tree", notice=N_("It was made."))
    store = portal.store
    within = viewer.within
    orgs, teams, projects = await Places(store, portal.accounts.audit).held(within)
    # Budgets in one read: every level with one. Rates and model lists are on each level's own page.
    budgets = {(b.scope, b.scope_id): b for b in await store.list_budgets()}
    return render(request, "admin/tree.html", status=400 if error else 200, title=N_("Orgs, teams and projects"),
                  orgs=orgs, teams=teams, projects=projects, budget=lambda scope, ident: _budget(budgets, scope, ident),
                  kinds=KINDS[1:] if within.tenant else KINDS, periods=PERIODS, made=made, error=error)


@page("/admin/tree/{scope}/{ident}", methods=("GET", "POST"), role="admin", tenants=True)
async def limits(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    scope, ident = request.match_info["scope"], request.match_info["ident"]
    error = None
    if request.method == "POST":
        try:
            await portal.accounts.set_limits(viewer.actor(), scope, ident, _changes(await form(request)),
                                             within=viewer.within)
        except ExpectedError as e:
            error = i18n.say(request[LANG], e)
        else:
            portal.plane.keys.clear()  # limits feed every cached key's chain: in force at once here
            return redirect(request, f"/admin/tree/{scope}/{ident}", notice=N_("The limits were saved."))
    shown = await portal.accounts.limits(scope, ident, viewer.within)
    return render(request, "admin/limits.html", status=400 if error else 200, title=N_("Limits"),
                  scope=scope, ident=ident, name=await _name(portal, scope, shown["id"]), shown=shown,
                  periods=PERIODS, error=error)


def _changes(posted: MultiDictProxy[str]) -> dict[str, Any]:
    """The limits form as Accounts.set_limits takes it: an empty field clears that limit."""
    changes: dict[str, Any] = {}
    for name in ("rpm", "tpm"):
        text = posted.get(name, "").strip()
        if text and not text.isdigit():
            raise AccountError(N_("{name} must be a whole number of zero or more, got {value}"),
                               params={"name": name, "value": repr(text)})
        changes[name] = int(text) if text else None
    budget = posted.get("budget", "").strip()
    changes["budget_micros"] = parse_money(budget) if budget else None
    period = posted.get("period", "").strip()
    changes["period"] = period or None
    models = [m.strip() for m in posted.get("models", "").split(",") if m.strip()]
    changes["models"] = models or None
    tools = [t.strip() for t in posted.get("tools", "").split(",") if t.strip()]
    changes["tools"] = tools or None  # MCP tools, as `keys limits --tools`: none named here narrows nothing
    return changes


def _budget(budgets: dict[tuple[str, str], Limits], scope: str, ident: str) -> tuple[str, str] | None:
    found = budgets.get((scope, ident))
    if found is None or found.budget_micros is None:
        return None
    return format_money(found.budget_micros), found.period or "month"


async def _name(portal: Portal, scope: str, ident: str) -> str:
    """The level's path as people write it (Demo/dev/app), or its id when it has none (a key)."""
    store = portal.store
    if scope == "project":
        path = await store.project_path(ident)
        return str(path) if path else ident
    if scope == "team":
        team = await store.team_by_id(ident)
        org = await store.org_by_id(team.org_id) if team else None
        return f"{org.name}/{team.name}" if org and team else ident
    if scope == "org":
        found = await store.org_by_id(ident)
        return found.name if found else ident
    return ident
