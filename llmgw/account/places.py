"""The tenancy tree as an administrator sees and grows it: orgs, teams and projects, with each level's limits.

`llmgw ctl tree`, the admin API's `/api/v1/tree` and the portal's tree page
read and make places through `Places`, so a place is checked and audited once,
the same way. A place is made on purpose, and one that exists already is
refused rather than quietly reused; a key goes only into a project that exists
unless it is made with `--create` (where.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from llmgw.account.errors import AccountError, Actor
from llmgw.account.scope import CLUSTER, Scope, places_said
from llmgw.account.service import limits_view
from llmgw.account.tree import TreeError, check_name
from llmgw.errors import N_
from llmgw.store import Conflict, KeysStore, Org, Project, Team

KINDS = ("org", "team", "project")

Audit = Callable[[Actor, str, str, Any, Any], Awaitable[None]]


class Places:
    def __init__(self, store: KeysStore, audit: Audit):
        self.store = store
        self._audit = audit

    async def tree(self, within: Scope = CLUSTER) -> list[dict[str, Any]]:
        """Every org, its teams and their projects, by name, each with its own limits (None: none of its own).

        A tenant administrator's tree holds their places and what is below; an org is named above a team
        they hold (its path begins with it) with its limits, the bounds theirs must keep inside."""
        store = self.store
        orgs, teams, projects = await self.held(within)
        projects_of: dict[str, list[dict[str, Any]]] = {}
        teams_of: dict[str, list[dict[str, Any]]] = {}
        org_names = {o.id: o.name for o in orgs}
        team_paths = {t.id: f"{org_names.get(t.org_id, t.org_id)}/{t.name}" for t in teams}
        # One read per level for its limits: a tree is tens of places, read by an administrator,
        # and the store has no "every limit" read to do it in one.
        for p in sorted(projects, key=lambda p: p.name):
            projects_of.setdefault(p.team_id, []).append({
                "kind": "project", "id": p.id, "name": p.name, "path": f"{team_paths.get(p.team_id)}/{p.name}",
                "created_at": p.created_at, "limits": limits_view(await store.get_limits("project", p.id))})
        for t in sorted(teams, key=lambda t: t.name):
            teams_of.setdefault(t.org_id, []).append({
                "kind": "team", "id": t.id, "name": t.name, "path": team_paths[t.id], "created_at": t.created_at,
                "limits": limits_view(await store.get_limits("team", t.id)),
                "projects": projects_of.get(t.id, [])})
        return [{"kind": "org", "id": o.id, "name": o.name, "path": o.name, "created_at": o.created_at,
                 "limits": limits_view(await store.get_limits("org", o.id)), "teams": teams_of.get(o.id, [])}
                for o in sorted(orgs, key=lambda o: o.name)]

    async def held(self, within: Scope = CLUSTER) -> tuple[list[Org], list[Team], list[Project]]:
        """The orgs (named above a team held), teams and projects inside `within`'s walls, the tree's order."""
        store = self.store
        every_team = await store.list_teams()
        orgs = [o for o in await store.list_orgs() if within.sees_org(o.id, every_team)]
        teams = [t for t in every_team if within.holds_team(t)]
        held = {t.id for t in teams}
        return orgs, teams, [p for p in await store.list_projects() if p.team_id in held]

    async def create(self, actor: Actor, kind: str, path: str, within: Scope = CLUSTER) -> dict[str, Any]:
        """Make one place: org NAME, team ORG/TEAM or project ORG/TEAM/PROJECT; its parent must exist.

        A tenant administrator makes teams in an org they hold and projects in a team they hold."""
        if kind not in KINDS:
            raise AccountError(N_('"{kind}" is not a kind of place; write org, team or project'),
                               params={"kind": kind})
        if kind == "org" and within.tenant:
            raise AccountError(N_("only a cluster administrator makes an org; you administer {places}"), 403,
                               "forbidden", params={"places": places_said(within)})
        names = path.split("/")
        if len(names) != KINDS.index(kind) + 1:
            raise AccountError(N_('"{path}" is not a {kind} path: write {shape}'),
                               params={"path": path, "kind": kind,
                                       "shape": "/".join(("ORG", "TEAM", "PROJECT")[:KINDS.index(kind) + 1])})
        try:
            for level, name in zip(KINDS, names, strict=False):
                check_name(level, name)
        except TreeError as e:
            raise AccountError(e.template, params=e.params) from None
        store = self.store
        try:
            if kind == "org":
                org = await store.create_org(names[0])
                made = {"kind": kind, "id": org.id, "path": org.name}
            else:
                org_ = await store.org_by_name(names[0])
                seen = org_ is not None and within.sees_org(org_.id, await store.list_teams(org_.id))
                if org_ is None or not seen:
                    raise _missing("org", names[0])  # one outside a tenant's walls is not there for them
                if kind == "team" and not within.holds_org(org_.id):
                    raise AccountError(N_("only the org's administrator makes teams in {org}; you administer "
                                          "{places}"), 403, "forbidden",
                                       params={"org": org_.name, "places": places_said(within)})
                if kind == "team":
                    team = await store.create_team(org_.id, names[1])
                    made = {"kind": kind, "id": team.id, "path": f"{org_.name}/{team.name}"}
                else:
                    team_ = await store.team_by_name(org_.id, names[1])
                    if team_ is None or not within.holds_team(team_):
                        raise _missing("team", f"{names[0]}/{names[1]}")
                    made_path = await store.create_project(team_.id, names[2])
                    made = {"kind": kind, "id": made_path.project.id, "path": str(made_path)}
        except Conflict:
            raise AccountError(N_("{kind} {path} exists already; llmgw ctl tree shows the tree"), 409, "conflict",
                               params={"kind": kind, "path": path}) from None
        await self._audit(actor, f"{kind}.create", f"{kind}:{made['id']}", None, made)
        return made


def _missing(kind: str, path: str) -> AccountError:
    return AccountError(N_("there is no {kind} {path}; make it first with llmgw ctl tree add {kind} {path}"),
                        404, "not_found", params={"kind": kind, "path": path})
