"""Keys, people and limits as the admin API, the CLI and the portal change them.

Every change is written to the audit log with what it was before and after,
in the public form of the thing: a key's id, name and shown prefix, never
its secret or its hash.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any, Protocol

from llmgw.account import keys as keymod
from llmgw.account.errors import AccountError, Actor
from llmgw.account.limits import CHAIN, LimitError, check_narrows, format_money
from llmgw.account.people import People
from llmgw.account.persontokens import PersonTokens
from llmgw.account.scope import CLUSTER, Scope, Walls
from llmgw.account.tree import TreeError, check_name, parse_project_path
from llmgw.account.where import project_for_key
from llmgw.errors import N_
from llmgw.events import Events
from llmgw.store import ApiKey, AuditEntry, AuditStore, KeysStore, Limits, PeopleStore, Person, ProjectPath


def key_view(key: ApiKey, path: ProjectPath | None, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    if key.revoked_at is not None:
        state = "revoked"
    elif key.expires_at is not None and key.expires_at <= now:
        state = "expired"
    else:
        state = "active"
    return {
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "project": str(path) if path else key.project_id,
        "project_id": key.project_id,
        "person_id": key.person_id,
        "band": key.band,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "state": state,
    }


def limits_view(limits: Limits | None) -> dict[str, Any] | None:
    if limits is None:
        return None
    view = asdict(limits)
    view["budget"] = None if limits.budget_micros is None else format_money(limits.budget_micros)
    return view


# A tenant administrator's audit log is read AUDIT_PAGE entries at a time, AUDIT_SCANNED at most (audit_log).
AUDIT_PAGE, AUDIT_SCANNED = 500, 10_000


class _Store(KeysStore, PeopleStore, AuditStore, Protocol):
    """What Accounts calls: the tree, keys and limits, people (through People), and the audit it writes."""


class Accounts:
    def __init__(self, store: _Store, events: Events | None = None):
        self.store = store
        self.events = events  # told of a key revoked (llmgw/events.py), for the webhooks
        self.people = People(store, self.audit)
        self.tokens = PersonTokens(store, self.audit)

    async def audit(self, actor: Actor, action: str, target: str, before: Any, after: Any) -> None:
        await self.store.add_audit(
            AuditEntry(at=time.time(), actor=actor.name, via=actor.via, action=action,
                       target=target, before=before, after=after)
        )

    async def audit_log(self, within: Scope = CLUSTER, *, limit: int = 100, offset: int = 0,
                        since: float | None = None, target: str | None = None, actor: str | None = None,
                        action: str | None = None) -> list[AuditEntry]:
        """The newest entries after `offset`, of those the scope may read.

        A tenant's are found by reading the log a page at a time until enough are inside the walls, at most
        AUDIT_SCANNED entries back: an old log of a busy cluster holds few of one team's, and a page of
        the portal must not read the whole log to say so."""
        if within.cluster:
            return await self.store.list_audit(limit=limit, since=since, target=target, actor=actor,
                                               action=action, offset=offset)
        walls, kept, read = Walls(self.store, within), list[AuditEntry](), 0
        while read < AUDIT_SCANNED and len(kept) < offset + limit:
            page = await self.store.list_audit(limit=AUDIT_PAGE, since=since, target=target, actor=actor,
                                               action=action, offset=read)
            kept += [e for e in page if await walls.audit_entry(e)]
            read += len(page)
            if len(page) < AUDIT_PAGE:
                break
        return kept[offset:offset + limit]

    # keys

    async def create_key(
        self, actor: Actor, *, name: str, project: str, ttl: float | None = None,
        band: str | None = None, person_email: str | None = None,
        max_key_ttl: float = 0.0, create: bool = False, within: Scope = CLUSTER,
    ) -> tuple[dict[str, Any], str]:
        """Make a key; returns its public view and the secret, which is never kept.

        The project must exist unless `create` (where.py says why); a tenant
        administrator's, under a team they hold (scope.py)."""
        if not name or len(name) > 128:
            raise AccountError(N_("a key needs a name of 1-128 characters"))
        try:
            org, team, proj = parse_project_path(project)
        except TreeError as e:
            raise AccountError(e.template, params=e.params) from None
        if ttl is not None and ttl <= 0:
            raise AccountError(N_("a key's --ttl must be longer than zero"))
        if max_key_ttl > 0:
            if ttl is None:
                ttl = max_key_ttl
            elif ttl > max_key_ttl:
                raise AccountError(
                    N_("--ttl {ttl} is longer than the cluster allows (auth.max_key_ttl {most}); "
                       "ask for a shorter one"),
                    params={"ttl": _days(ttl), "most": _days(max_key_ttl)},
                )
        if band is not None:
            check_name("band", band)
        walls = Walls(self.store, within)
        person_id = None
        if person_email:
            person = await self.store.person_by_email(person_email)
            if person is None or not await walls.sees_person(person):
                raise AccountError(N_("no person {who} is known here"), 404, "not_found", params={"who": person_email})
            person_id = person.id
        path = await project_for_key(self.store, org, team, proj, create=create, within=walls)
        now = time.time()
        secret = keymod.new_secret()
        key = ApiKey(
            id=keymod.new_id("key"), name=name, project_id=path.project.id,
            digest=keymod.digest(secret), prefix=keymod.shown_prefix(secret),
            person_id=person_id, band=band, created_at=now,
            expires_at=None if ttl is None else now + ttl,
        )
        await self.store.add_key(key)
        view = key_view(key, path, now)
        await self.audit(actor, "key.create", f"key:{key.id}", None, view)
        return view, secret

    async def key(self, key_id: str, within: Scope = CLUSTER) -> dict[str, Any]:
        key = await self.store.key_by_id(key_id)
        if key is None or not await Walls(self.store, within).project(key.project_id):
            raise AccountError(N_("no key {key}; llmgw keys list shows them"), 404, "not_found", params={"key": key_id})
        view = key_view(key, await self.store.project_path(key.project_id))
        view["limits"] = limits_view(await self.store.get_limits("key", key.id))
        return view

    async def list_keys(self, project: str | None = None, within: Scope = CLUSTER) -> list[dict[str, Any]]:
        walls = Walls(self.store, within)
        project_id = None
        if project:
            try:
                path = await self.store.project_by_path(*parse_project_path(project))
            except TreeError as e:
                raise AccountError(e.template, params=e.params) from None
            if path is None or not within.holds_path(path):
                raise AccountError(N_("no project {project}"), 404, "not_found", params={"project": project})
            project_id = path.project.id
        paths: dict[str, ProjectPath | None] = {}
        views = []
        for key in await self.store.list_keys(project_id):
            if not await walls.project(key.project_id):
                continue
            if key.project_id not in paths:
                paths[key.project_id] = await self.store.project_path(key.project_id)
            views.append(key_view(key, paths[key.project_id]))
        return views

    async def revoke_key(self, actor: Actor, key_id: str, within: Scope = CLUSTER) -> dict[str, Any]:
        before = await self.store.key_by_id(key_id)
        if before is None or not await Walls(self.store, within).project(before.project_id):
            raise AccountError(N_("no key {key}; llmgw keys list shows them"), 404, "not_found", params={"key": key_id})
        after = await self.store.revoke_key(key_id, time.time())
        path = await self.store.project_path(before.project_id)
        view = key_view(after or before, path)
        if before.revoked_at is None:
            await self.audit(actor, "key.revoke", f"key:{key_id}", key_view(before, path), view)
            if self.events is not None:
                self.events.emit("key_revoked", subject=key_id, key_id=key_id, key_name=before.name,
                                 project=str(path) if path is not None else before.project_id,
                                 by=actor.name, via=actor.via, **places_of(path))
        return view

    # limits

    async def resolve_scope(self, scope: str, ident: str) -> tuple[str, list[tuple[str, str]]]:
        """The scope's id and the (scope, id) pairs above it, top first.

        `ident` is an id (org_…, key_…) or a name path: ORG, ORG/TEAM,
        ORG/TEAM/PROJECT, which is what people remember.
        """
        if scope not in CHAIN:
            raise AccountError(N_('--scope must be one of {scopes}, not "{scope}"'),
                               params={"scopes": ", ".join(CHAIN), "scope": scope})
        store = self.store
        if scope == "key":
            key = await store.key_by_id(ident)
            if key is None:
                raise AccountError(N_("no key {key}"), 404, "not_found", params={"key": ident})
            path = await store.project_path(key.project_id)
            assert path is not None, "a key's project_id is a foreign key, and projects are never deleted"
            return key.id, [("org", path.org.id), ("team", path.team.id), ("project", path.project.id)]
        if scope == "project":
            path = await store.project_path(ident) if ident.startswith("prj_") else None
            if path is None and "/" in ident:
                try:
                    path = await store.project_by_path(*parse_project_path(ident))
                except TreeError as e:
                    raise AccountError(e.template, params=e.params) from None
            if path is None:
                raise AccountError(N_("no project {project}"), 404, "not_found", params={"project": ident})
            return path.project.id, [("org", path.org.id), ("team", path.team.id)]
        if scope == "team":
            team = await store.team_by_id(ident) if ident.startswith("team_") else None
            if team is None and ident.count("/") == 1:
                org_name, team_name = ident.split("/")
                org = await store.org_by_name(org_name)
                team = await store.team_by_name(org.id, team_name) if org else None
            if team is None:
                raise AccountError(N_("no team {team} (write ORG/TEAM or its id)"), 404, "not_found",
                                   params={"team": ident})
            return team.id, [("org", team.org_id)]
        org = await store.org_by_id(ident) if ident.startswith("org_") else None
        org = org or await store.org_by_name(ident)
        if org is None:
            raise AccountError(N_("no org {org}"), 404, "not_found", params={"org": ident})
        return org.id, []

    async def _resolve_within(self, scope: str, ident: str, within: Scope) -> tuple[str, list[tuple[str, str]]]:
        """resolve_scope, with what lies outside a tenant's walls refused as not there."""
        try:
            scope_id, above = await self.resolve_scope(scope, ident)
        except AccountError as e:
            if within.tenant and e.status == 404:
                raise _outside(scope, ident) from None
            raise
        walls = Walls(self.store, within)
        held = await (walls.key(scope_id) if scope == "key" else walls.place(scope, scope_id))
        if not held:
            raise _outside(scope, ident)
        return scope_id, above

    @staticmethod
    def _below_held(scope: str, scope_id: str, above: list[tuple[str, str]], within: Scope) -> bool:
        """Whether a level lies strictly below a place the tenant administers (the walls already hold it)."""
        if scope in ("project", "key"):
            return True
        return scope == "team" and any(within.holds_org(i) for s, i in above if s == "org")

    async def limits(self, scope: str, ident: str, within: Scope = CLUSTER) -> dict[str, Any]:
        """A level's own limits and those above it; a tenant administrator reads their places' and below."""
        scope_id, above = await self._resolve_within(scope, ident, within)
        own = await self.store.get_limits(scope, scope_id)
        return {
            "scope": scope, "id": scope_id,
            "limits": limits_view(own or Limits(scope, scope_id)),
            "above": [limits_view(await self.store.get_limits(s, i) or Limits(s, i)) for s, i in above],
        }

    async def set_limits(
        self, actor: Actor, scope: str, ident: str, changes: dict[str, Any], *, replace_all: bool = False,
        within: Scope = CLUSTER,
    ) -> dict[str, Any]:
        """Change only the fields in `changes` (None clears one), or with
        `replace_all` write exactly `changes`, every other field cleared.

        A tenant administrator sets limits below their place, never on it: a
        team's own limits are its org's administrator's to set, as an org's
        are a cluster administrator's, and check_narrows keeps every change
        inside what the level above allows."""
        allowed = {"rpm", "tpm", "budget_micros", "period", "models", "expires_at", "tools"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise AccountError(N_("unknown limit {unknown}; limits are {known}"),
                               params={"unknown": ", ".join(unknown), "known": ", ".join(sorted(allowed))})
        for name in ("rpm", "tpm", "budget_micros"):
            value = changes.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise AccountError(N_("{name} must be a whole number of zero or more, got {value}"),
                                   params={"name": name, "value": repr(value)})
        period = changes.get("period")
        if period is not None and period not in ("day", "month"):
            raise AccountError(N_('--period must be day or month, not "{period}"'), params={"period": period})
        models = changes.get("models")
        if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) and m for m in models)):
            raise AccountError(N_("models must be a list of model names"))
        tools = changes.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)):
            raise AccountError(N_("tools must be a list of server.tool patterns, like jira.* or db.query"))
        scope_id, above = await self._resolve_within(scope, ident, within)
        if within.tenant and not self._below_held(scope, scope_id, above, within):
            raise AccountError(N_("the limits of {scope} {ident} are set by the level above it; you set those of "
                                  "the teams, projects and keys below what you administer"), 403, "forbidden",
                               params={"scope": scope, "ident": ident})
        before = await self.store.get_limits(scope, scope_id)
        base = Limits(scope, scope_id) if replace_all or before is None else before
        after = replace(base, **changes)
        if after.budget_micros is not None and after.period is None:
            after = replace(after, period="month")
        parents = [await self.store.get_limits(s, i) for s, i in above]
        try:
            check_narrows(after, parents)
        except LimitError as e:
            raise AccountError(e.template, params=e.params) from None
        await self.store.put_limits(after)
        await self.audit(actor, "limits.set", f"{scope}:{scope_id}", limits_view(before), limits_view(after))
        return {"scope": scope, "id": scope_id, "limits": limits_view(after)}

    # people

    async def add_person(self, actor: Actor, *, email: str, name: str, role: str, password: str | None,
                         member_of: Sequence[str] = ()) -> Person:
        """People.add, for callers that hold an Accounts; the password is made when None."""
        view, _ = await self.people.add(actor, email=email, name=name, role=role, password=password,
                                        member_of=member_of)
        person = await self.store.person_by_id(view["id"])
        assert person is not None, "a person just added is there to read"
        return person


def places_of(path: ProjectPath | None) -> dict[str, str]:
    """The org and team an event about something of a project's names, for the tenants' webhooks
    (llmgw.notify.delivery.wants): they are sent the events of their own place."""
    return {} if path is None else {"org_id": path.org.id, "team_id": path.team.id}


def _outside(scope: str, ident: str) -> AccountError:
    """What a tenant administrator hears of a level outside their walls, whether or not it exists."""
    return AccountError(N_("no {scope} {ident} among what you administer"), 404, "not_found",
                        params={"scope": scope, "ident": ident})


def _days(seconds: float) -> str:
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds)}s"
