"""People: who they are, their role, where in the tree they belong, and their passwords.

The admin API, the CLI and the portal all change people through `People`, so
each change is checked and audited once, the same way. A person's view never
holds their password's hash; a password made here is returned once, to be
shown once, and is never audited.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from llmgw.account import keys as keymod
from llmgw.account.errors import AccountError, Actor
from llmgw.account.passwords import check_password, check_password_strength, hash_password, new_password
from llmgw.account.scope import ADMINISTERED, CLUSTER, Scope, Walls, places_said
from llmgw.account.tree import TreeError, parse_project_path
from llmgw.config import PORTAL_LANGUAGES, SignupSettings
from llmgw.errors import N_
from llmgw.store import Conflict, KeysStore, Membership, PeopleStore, Person, ProjectPath

ROLES = ("admin", "operator", "member")
PLACES = ("org", "team", "project")

Audit = Callable[[Actor, str, str, Any, Any], Awaitable[None]]


def person_view(person: Person) -> dict[str, Any]:
    """A person as the API, the CLI and the portal show them: never their password's hash."""
    return {
        "id": person.id,
        "email": person.email,
        "name": person.name,
        "role": person.role,
        "state": "suspended" if person.disabled else "active",
        "suspended_by": person.suspended_by,
        "locale": person.locale,
        "must_change_password": person.must_change_password,
        "has_password": person.password_hash is not None,
        "created_at": person.created_at,
        "password_changed_at": person.password_changed_at,
    }


def _check_email(email: str) -> str:
    email = email.strip()
    local, at, domain = email.rpartition("@")
    if not at or not local or not domain or any(c.isspace() for c in email) or len(email) > 254:
        raise AccountError(N_('"{email}" is not an e-mail address'), params={"email": email})
    return email


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 128:
        raise AccountError(N_("a person needs a name of 1-128 characters"))
    return name


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise AccountError(N_('"{role}" is not a role; roles are {roles}'),
                           params={"role": role, "roles": ", ".join(ROLES)})
    return role


def _active_admin(person: Person) -> bool:
    return person.role == "admin" and not person.disabled


def _check_strength(password: str, email: str) -> None:
    weakness = check_password_strength(password, email)
    if weakness is not None:
        raise AccountError(weakness, params={})


class _Store(KeysStore, PeopleStore, Protocol):
    """What People calls: people and their sessions, places and identities, and the tree they are placed in."""


class People:
    def __init__(self, store: _Store, audit: Audit):
        self.store = store
        self._audit = audit

    # reading

    async def person(self, ident: str) -> Person:
        """The person by id (usr_…) or e-mail; AccountError 404 when there is none."""
        found = await self.store.person_by_id(ident) if ident.startswith("usr_") else None
        found = found or await self.store.person_by_email(ident)
        if found is None:
            raise AccountError(N_("no person {who} is known here; llmgw people list shows them"),
                               404, "not_found", params={"who": ident})
        return found

    async def list(self, within: Scope = CLUSTER) -> builtins.list[dict[str, Any]]:
        walls = Walls(self.store, within)
        return [person_view(p) for p in await self.store.list_people() if await walls.sees_person(p)]

    async def show(self, ident: str, within: Scope = CLUSTER) -> dict[str, Any]:
        """The person's view with their places in the tree and their open sessions."""
        person = await self._seen(ident, within)
        return await self._full_view(person, within)

    async def _seen(self, ident: str, within: Scope) -> Person:
        """The person, when inside the walls; else the same 404 as for nobody."""
        person = await self.person(ident)
        if not await Walls(self.store, within).sees_person(person):
            raise AccountError(N_("no person {who} is known here; llmgw people list shows them"),
                               404, "not_found", params={"who": ident})
        return person

    async def _governed(self, ident: str, within: Scope) -> Person:
        """The person, when a tenant administrator may change them (scope.py: every place of theirs inside)."""
        person = await self._seen(ident, within)
        if not await Walls(self.store, within).governs_person(person):
            raise AccountError(N_("{email} has places or a role beyond what you administer; a cluster "
                                  "administrator changes them"), 403, "forbidden", params={"email": person.email})
        return person

    async def _full_view(self, person: Person, within: Scope = CLUSTER) -> dict[str, Any]:
        view = person_view(person)
        walls = Walls(self.store, within)
        places = [m for m in await self.store.memberships(person.id) if await walls.membership(m)]
        view["member_of"] = [await self._place_name(m) for m in places]
        view["administers"] = [await self._place_name(m) for m in places if m.administers]
        view["identities"] = [{"source": i.source, "subject": i.subject, "seen_at": i.seen_at}
                              for i in await self.store.identities_of(person.id)]
        view["sessions"] = [
            {"created_at": s.created_at, "last_seen_at": s.last_seen_at, "expires_at": s.expires_at,
             "address": s.address, "agent": s.agent}
            for s in await self.store.list_sessions(person.id)
        ]
        return view

    # adding

    async def add(self, actor: Actor, *, email: str, name: str, role: str = "member",
                  password: str | None = None, member_of: Sequence[str] = (),
                  within: Scope = CLUSTER) -> tuple[dict[str, Any], str | None]:
        """Add a person; returns their view and the password made for them when none was given,
        which they must change at their first sign-in. A tenant administrator adds members, each
        to at least one place they hold."""
        email, name, role = _check_email(email), _check_name(name), _check_role(role)
        if within.tenant:
            if role != "member":
                raise AccountError(N_("only a cluster administrator gives the role {role}; you administer "
                                      "{places}, and add members there"), 403, "forbidden",
                                   params={"role": role, "places": places_said(within)})
            if not member_of:
                raise AccountError(N_("say where they belong (--member-of), one of the places you administer: "
                                      "{places}"), params={"places": ", ".join(within.places)})
        made = None
        if password is None:
            made = password = new_password()
        else:
            _check_strength(password, email)
        places = [await self._place(p, within) for p in member_of]
        now = time.time()
        person = Person(
            id=keymod.new_id("usr"), email=email, name=name, role=role,
            password_hash=await asyncio.to_thread(hash_password, password), created_at=now,
            must_change_password=made is not None, password_changed_at=now,
        )
        try:
            await self.store.add_person(person)
        except Conflict:
            raise AccountError(N_("{email} already belongs to someone here; use another e-mail, "
                                  "or find that person with llmgw people show"),
                               409, "conflict", params={"email": email}) from None
        for scope, scope_id, _ in places:
            await self.store.add_membership(Membership(person.id, scope, scope_id, now))
        view = await self._full_view(person, within)
        await self._audit(actor, "person.create", f"person:{person.id}", None, view)
        return view, made

    async def sign_up(self, *, email: str, name: str, password: str, signup: SignupSettings) -> Person:
        """A person making their own account: only from the domains in auth.signup.domains,
        as a member of auth.signup.project."""
        email, name = _check_email(email), _check_name(name)
        if not signup.domains:
            raise AccountError(N_("signing up is off here; ask an administrator to add you"), 403, "forbidden")
        domain = email.rpartition("@")[2].casefold()
        if domain not in signup.domains:
            raise AccountError(N_("signing up is open only to e-mail addresses at {domains}; "
                                  "ask an administrator to add you"),
                               403, "forbidden", params={"domains": ", ".join(signup.domains)})
        _check_strength(password, email)
        project = await self.store.ensure_project(*parse_project_path(signup.project))
        now = time.time()
        person = Person(id=keymod.new_id("usr"), email=email, name=name, role="member",
                        password_hash=await asyncio.to_thread(hash_password, password),
                        created_at=now, password_changed_at=now)
        try:
            await self.store.add_person(person)
        except Conflict:
            raise AccountError(N_("{email} already has an account here; sign in, or ask an "
                                  "administrator to reset its password"),
                               409, "conflict", params={"email": email}) from None
        await self.store.add_membership(Membership(person.id, "project", project.project.id, now))
        await self._audit(Actor(email, "portal"), "person.signup", f"person:{person.id}", None,
                          person_view(person) | {"member_of": [f"project:{project}"]})
        return person

    # changing

    async def set_role(self, actor: Actor, ident: str, role: str, within: Scope = CLUSTER) -> dict[str, Any]:
        if within.tenant:
            raise AccountError(N_("only a cluster administrator changes roles; you administer {places}"), 403,
                               "forbidden", params={"places": places_said(within)})
        role = _check_role(role)
        before = await self.person(ident)
        return await self.change(actor, "person.role", before, replace(before, role=role))

    async def suspend(self, actor: Actor, ident: str, *, lift: bool = False,
                      within: Scope = CLUSTER) -> dict[str, Any]:
        """Suspend a person (ending every session of theirs) or, with `lift`, let them in again."""
        before = await self._governed(ident, within)
        view = await self.change(actor, "person.unsuspend" if lift else "person.suspend",
                                  before, replace(before, disabled=not lift, suspended_by=None if lift else "admin"))
        if not lift:
            await self.store.delete_sessions(before.id)
        return view

    async def reset_password(self, actor: Actor, ident: str, within: Scope = CLUSTER) -> tuple[dict[str, Any], str]:
        """A new password, returned once, to change at the next sign-in; every session ends."""
        before = await self._governed(ident, within)
        password = new_password()
        after = replace(before, password_hash=await asyncio.to_thread(hash_password, password),
                        must_change_password=True, password_changed_at=time.time())
        view = await self.change(actor, "person.reset_password", before, after)
        await self.store.delete_sessions(before.id)
        return view, password

    async def change_password(self, actor: Actor, person_id: str, old: str, new: str, *,
                              keep_session: str | None = None) -> None:
        """A person changing their own password: every other session of theirs ends
        (all but `keep_session`, the one they changed it from)."""
        before = await self.person(person_id)
        known = before.password_hash is not None and await asyncio.to_thread(
            check_password, old, before.password_hash)
        if not known:
            raise AccountError(N_("that is not your current password"), 403, "forbidden")
        if new == old:
            raise AccountError(N_("the new password must differ from the current one"))
        _check_strength(new, before.email)
        after = replace(before, password_hash=await asyncio.to_thread(hash_password, new),
                        must_change_password=False, password_changed_at=time.time())
        await self.change(actor, "person.change_password", before, after)
        await self.store.delete_sessions(before.id, keep=keep_session)

    async def set_locale(self, person_id: str, locale: str | None) -> None:
        """The person's own choice of language; None follows the browser again. Not audited: a preference."""
        if locale is not None and locale not in PORTAL_LANGUAGES:
            raise AccountError(N_('"{locale}" is not one of the portal\'s languages ({languages})'),
                               params={"locale": locale, "languages": ", ".join(PORTAL_LANGUAGES)})
        person = await self.person(person_id)
        await self.store.update_person(replace(person, locale=locale))

    async def join(self, actor: Actor, ident: str, place: str, within: Scope = CLUSTER) -> dict[str, Any]:
        """Make the person a member of `place`: org:NAME, team:ORG/TEAM or project:ORG/TEAM/PROJECT."""
        person = await self._seen(ident, within)
        scope, scope_id, label = await self._place(place, within)
        await self.store.add_membership(Membership(person.id, scope, scope_id, time.time()))
        await self._audit(actor, "person.join", f"person:{person.id}", None, {"place": label})
        return await self._full_view(person, within)

    async def leave(self, actor: Actor, ident: str, place: str, within: Scope = CLUSTER) -> dict[str, Any]:
        person = await self._seen(ident, within)
        scope, scope_id, label = await self._place(place, within)
        await self.store.remove_membership(person.id, scope, scope_id)
        await self._audit(actor, "person.leave", f"person:{person.id}", {"place": label}, None)
        return await self._full_view(person, within)

    async def administer(self, actor: Actor, ident: str, place: str, *, remove: bool = False,
                         within: Scope = CLUSTER) -> dict[str, Any]:
        """Make the person the administrator of an org or a team (a member of it too), or no longer.

        A cluster administrator names any; an org's administrator names
        administrators of its teams. Taking it away leaves them a member."""
        person = await self._seen(ident, within) if within.tenant else await self.person(ident)
        scope, scope_id, label = await self._place(place, within)
        if scope not in ADMINISTERED:
            raise AccountError(N_("an administrator is of an org or a team, not of a {scope}"),
                               params={"scope": scope})
        if within.tenant:
            team = await self.store.team_by_id(scope_id) if scope == "team" else None
            if team is None or not within.holds_org(team.org_id):
                raise AccountError(N_("only a cluster administrator, or its org's administrator, names the "
                                      "administrators of {place}; you administer {places}"), 403, "forbidden",
                                   params={"place": label, "places": places_said(within)})
        if person.disabled and not remove:
            raise AccountError(N_("{email} is suspended; lift it before making them an administrator"),
                               409, "conflict", params={"email": person.email})
        if remove:
            changed = await self.store.set_administers(person.id, scope, scope_id, False)
        else:
            await self.store.add_membership(Membership(person.id, scope, scope_id, time.time()))
            changed = await self.store.set_administers(person.id, scope, scope_id, True)
        if changed:
            await self._audit(actor, "person.unadminister" if remove else "person.administer",
                              f"person:{person.id}", None, {"place": label})
        return await self._full_view(person, within)

    # where a person may work

    async def projects_of(self, person_id: str) -> builtins.list[ProjectPath]:
        """Every project the person may use, by path: an org's or a team's membership covers those below it."""
        found: dict[str, ProjectPath] = {}
        for m in await self.store.memberships(person_id):
            if m.scope == "project":
                path = await self.store.project_path(m.scope_id)
                if path is not None:
                    found[path.project.id] = path
                continue
            teams = [m.scope_id] if m.scope == "team" else [t.id for t in await self.store.list_teams(m.scope_id)]
            for team_id in teams:
                for project in await self.store.list_projects(team_id):
                    path = await self.store.project_path(project.id)
                    if path is not None:
                        found[project.id] = path
        return sorted(found.values(), key=str)

    async def may_use_project(self, person_id: str, project_id: str) -> bool:
        path = await self.store.project_path(project_id)
        if path is None:
            return False
        held = {(m.scope, m.scope_id) for m in await self.store.memberships(person_id)}
        return bool(held & {("org", path.org.id), ("team", path.team.id), ("project", path.project.id)})

    # inside

    async def change(self, actor: Actor, action: str, before: Person, after: Person,
                     note: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write `after` over `before` and audit it (with `note` beside the new view).

        Every change to a person goes through here, the CLI's, the portal's and the admin API's as much
        as a directory's (OIDC, LDAP, SCIM, llmgw.auth.directory): so the last active admin is kept here,
        where no path can go round it. SCIM once suspended the only admin because only the CLI, the
        admin API and the portal checked (issue 25)."""
        if _active_admin(before) and not _active_admin(after):
            await self._keep_an_admin(before)
        await self.store.update_person(after)
        view = person_view(after)
        await self._audit(actor, action, f"person:{after.id}", person_view(before), view | (note or {}))
        return view

    async def _keep_an_admin(self, leaving: Person) -> None:
        others = [p for p in await self.store.list_people()
                  if p.role == "admin" and not p.disabled and p.id != leaving.id]
        if not others:
            raise AccountError(N_("{email} is the last active admin; make someone else an admin first"),
                               409, "conflict", params={"email": leaving.email})

    async def resolve_place(self, place: str, within: Scope = CLUSTER) -> tuple[str, str, str]:
        """(scope, id, "scope:PATH") for "org:NAME", "team:ORG/TEAM" or "project:ORG/TEAM/PROJECT";
        AccountError when it is not one, or not in the tree (or not inside `within`'s walls)."""
        return await self._place(place, within)

    async def place_name(self, m: Membership) -> str:
        """A membership's place as "scope:PATH"."""
        return await self._place_name(m)

    async def _place(self, place: str, within: Scope = CLUSTER) -> tuple[str, str, str]:
        """(scope, id, "scope:PATH") for "org:NAME", "team:ORG/TEAM" or "project:ORG/TEAM/PROJECT";
        a place outside `within`'s walls is missing, as one that is not there."""
        scope, scope_id, label = await self._any_place(place)
        if not await Walls(self.store, within).place(scope, scope_id):
            raise AccountError(N_("there is no {scope} {path}; make it first"), 404, "not_found",
                               params={"scope": scope, "path": place.partition(":")[2]})
        return scope, scope_id, label

    async def _any_place(self, place: str) -> tuple[str, str, str]:
        scope, colon, path = place.partition(":")
        if not colon or scope not in PLACES:
            raise AccountError(N_('"{place}" is not a place: write org:NAME, team:ORG/TEAM or '
                                  'project:ORG/TEAM/PROJECT'), params={"place": place})
        missing = AccountError(N_("there is no {scope} {path}; make it first"), 404, "not_found",
                               params={"scope": scope, "path": path})
        if scope == "project":
            try:
                found = await self.store.project_by_path(*parse_project_path(path))
            except TreeError:
                raise missing from None
            if found is None:
                raise missing
            return scope, found.project.id, f"project:{found}"
        names = path.split("/")
        org = await self.store.org_by_name(names[0])
        if scope == "org":
            if org is None or len(names) != 1:
                raise missing
            return scope, org.id, f"org:{org.name}"
        team = await self.store.team_by_name(org.id, names[1]) if org is not None and len(names) == 2 else None
        if org is None or team is None:
            raise missing
        return scope, team.id, f"team:{org.name}/{team.name}"

    async def _place_name(self, m: Membership) -> str:
        if m.scope == "project":
            path = await self.store.project_path(m.scope_id)
            return f"project:{path}" if path else f"project:{m.scope_id}"
        if m.scope == "team":
            team = await self.store.team_by_id(m.scope_id)
            org = await self.store.org_by_id(team.org_id) if team else None
            return f"team:{org.name}/{team.name}" if team and org else f"team:{m.scope_id}"
        org = await self.store.org_by_id(m.scope_id)
        return f"org:{org.name}" if org else f"org:{m.scope_id}"
