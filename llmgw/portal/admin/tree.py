"""/admin/tree: orgs, their teams and projects, made here, with the limits and budget of each level."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from llmgw.account import AccountError, Actor, check_name, format_money, parse_money, parse_project_path
from llmgw.errors import N_, ExpectedError
from llmgw.portal import i18n
from llmgw.portal.web import LANG, PORTAL, Portal, Viewer, form, page, redirect, render
from llmgw.store import Conflict, Limits

KINDS = ("org", "team", "project")
PERIODS = ("month", "day")
# The templates say these words through _(kind) and _(period); marked here so that they are extracted.
WORDS = (N_("org"), N_("team"), N_("project"), N_("key"), N_("month"), N_("day"))


@page("/admin/tree", methods=("GET", "POST"), role="admin")
async def tree(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    made = {"kind": "project", "path": "", "budget": "", "period": "month"}
    error = None
    if request.method == "POST":
        posted = await form(request)
        made = {k: posted.get(k, "").strip() for k in made}
        try:
            scope, scope_id = await _create(portal, viewer.actor(), made["kind"], made["path"])
            if made["budget"]:
                await portal.accounts.set_limits(viewer.actor(), scope, scope_id, {
                    "budget_micros": parse_money(made["budget"]),
                    "period": made["period"] if made["period"] in PERIODS else "month"})
                portal.plane.keys.clear()  # a budget is in every cached key's chain below it
        except ExpectedError as e:
            error = i18n.say(request[LANG], e)
        else:
            return redirect(request, "/admin/tree", notice=N_("It was made."))
    store = portal.store
    orgs, teams, projects = await store.list_orgs(), await store.list_teams(), await store.list_projects()
    # Budgets in one read: every level with one. Rates and model lists are on each level's own page.
    budgets = {(b.scope, b.scope_id): b for b in await store.list_budgets()}
    return render(request, "admin/tree.html", status=400 if error else 200, title=N_("Orgs, teams and projects"),
                  orgs=orgs, teams=teams, projects=projects, budget=lambda scope, ident: _budget(budgets, scope, ident),
                  kinds=KINDS, periods=PERIODS, made=made, error=error)


@page("/admin/tree/{scope}/{ident}", methods=("GET", "POST"), role="admin")
async def limits(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    scope, ident = request.match_info["scope"], request.match_info["ident"]
    error = None
    if request.method == "POST":
        try:
            await portal.accounts.set_limits(viewer.actor(), scope, ident, _changes(await form(request)))
        except ExpectedError as e:
            error = i18n.say(request[LANG], e)
        else:
            portal.plane.keys.clear()  # limits feed every cached key's chain: in force at once here
            return redirect(request, f"/admin/tree/{scope}/{ident}", notice=N_("The limits were saved."))
    shown = await portal.accounts.limits(scope, ident)
    return render(request, "admin/limits.html", status=400 if error else 200, title=N_("Limits"),
                  scope=scope, ident=ident, name=await _name(portal, scope, shown["id"]), shown=shown,
                  periods=PERIODS, error=error)


async def _create(portal: Portal, actor: Actor, kind: str, path: str) -> tuple[str, str]:
    """Make an org (NAME), a team (ORG/TEAM) or a project (ORG/TEAM/PROJECT); audited as `actor`."""
    store = portal.store
    try:
        if kind == "org":
            made_id = (await store.create_org(check_name("org", path))).id
        elif kind == "team":
            org_name, _, team_name = path.partition("/")
            org = await store.org_by_name(check_name("org", org_name))
            if org is None:
                raise AccountError(N_("no org {org}"), 404, "not_found", params={"org": org_name})
            made_id = (await store.create_team(org.id, check_name("team", team_name))).id
        elif kind == "project":
            org_name, team_name, project_name = parse_project_path(path)
            org = await store.org_by_name(org_name)
            team = await store.team_by_name(org.id, team_name) if org else None
            if team is None:
                raise AccountError(N_("no team {team}; make it first"), 404, "not_found",
                                   params={"team": f"{org_name}/{team_name}"})
            made_id = (await store.create_project(team.id, project_name)).project.id
        else:
            raise AccountError(N_('"{kind}" is not one of org, team or project'), params={"kind": kind})
    except Conflict:
        raise AccountError(N_("{path} is there already"), 409, "conflict", params={"path": path}) from None
    await portal.accounts.audit(actor, f"{kind}.create", f"{kind}:{made_id}", None, {"path": path})
    return kind, made_id


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
