"""What an administrator may reach: the whole cluster, or the orgs and teams they administer (issue 31).

A cluster administrator (the role admin, or the cluster's admin token) holds
everything. A tenant administrator holds the orgs and teams whose memberships
say they administer them (`llmgw people admin`), and every team and project
below those: they add and suspend people there, make and revoke keys there,
set limits below their place, and read its usage and audit log. Nothing above
or beside.

Every service that lists or changes people, keys, limits, the tree, usage or
the audit log takes a Scope, so the portal, the CLI and the admin API keep
one set of walls. What lies outside them is answered as if it were not
there: a key of Beta is "no key", never "not yours", so a tenant learns
nothing of its neighbours, not even that a name is taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from llmgw.store import AuditEntry, KeysStore, Membership, PeopleStore, Person, ProjectPath, Team

ADMINISTERED = ("org", "team")  # the places a person may administer; a project's people are its team's


@dataclass(frozen=True)
class Scope:
    """Everything (`cluster`), or these orgs and teams and what is below them."""

    cluster: bool = False
    orgs: frozenset[str] = frozenset()
    teams: frozenset[str] = frozenset()
    # The places as people name them ("org:Acme", "team:Beta/ml"), for sentences and the profile page.
    places: tuple[str, ...] = field(default=(), compare=False)

    @property
    def tenant(self) -> bool:
        return not self.cluster

    def holds_org(self, org_id: str) -> bool:
        """The whole org: a cluster administrator's, or its own administrator's."""
        return self.cluster or org_id in self.orgs

    def holds_team(self, team: Team) -> bool:
        return self.cluster or team.id in self.teams or team.org_id in self.orgs

    def holds_path(self, path: ProjectPath) -> bool:
        return self.holds_team(path.team)

    def sees_org(self, org_id: str, teams: Iterable[Team]) -> bool:
        """Whether the org's name is shown: held whole, or a team of it is (a team's path begins with its org)."""
        return self.holds_org(org_id) or any(t.org_id == org_id and self.holds_team(t) for t in teams)


CLUSTER = Scope(cluster=True)


class _Store(KeysStore, PeopleStore, Protocol):
    """What the walls read: the tree, keys and people's memberships."""


async def scope_of(store: _Store, person: Person) -> Scope | None:
    """The person's scope: a cluster's for an active admin, a tenant's for an administrator of places, else None."""
    if person.disabled:
        return None
    if person.role == "admin":
        return CLUSTER
    held = [m for m in await store.memberships(person.id) if m.administers and m.scope in ADMINISTERED]
    if not held:
        return None
    orgs = frozenset(m.scope_id for m in held if m.scope == "org")
    teams = frozenset(m.scope_id for m in held if m.scope == "team")
    names: list[str] = []
    for m in held:
        if m.scope == "org":
            org = await store.org_by_id(m.scope_id)
            names.append(f"org:{org.name if org else m.scope_id}")
        else:
            team = await store.team_by_id(m.scope_id)
            org = await store.org_by_id(team.org_id) if team else None
            names.append(f"team:{org.name}/{team.name}" if team and org else f"team:{m.scope_id}")
    return Scope(orgs=orgs, teams=teams, places=tuple(sorted(names)))


class Walls:
    """A scope's checks that need the store: whose key, whose person, whose audit entry.

    Made per call (an admin request, a page); it remembers what it read for as
    long, so a listing of a thousand keys reads each project once.
    """

    def __init__(self, store: _Store, scope: Scope):
        self.store, self.scope = store, scope
        self._teams: dict[str, Team | None] = {}
        self._projects: dict[str, ProjectPath | None] = {}

    async def team(self, team_id: str) -> bool:
        if self.scope.cluster:
            return True
        if team_id not in self._teams:
            self._teams[team_id] = await self.store.team_by_id(team_id)
        team = self._teams[team_id]
        return team is not None and self.scope.holds_team(team)

    async def project(self, project_id: str | None) -> bool:
        if self.scope.cluster:
            return True
        if project_id is None:
            return False
        if project_id not in self._projects:
            self._projects[project_id] = await self.store.project_path(project_id)
        path = self._projects[project_id]
        return path is not None and self.scope.holds_path(path)

    async def key(self, key_id: str | None) -> bool:
        if self.scope.cluster:
            return True
        key = await self.store.key_by_id(key_id) if key_id else None
        return key is not None and await self.project(key.project_id)

    async def place(self, scope: str, scope_id: str) -> bool:
        """A place in the tree: an org held whole, a team or project under what is held."""
        if self.scope.cluster:
            return True
        if scope == "org":
            return self.scope.holds_org(scope_id)
        if scope == "team":
            return await self.team(scope_id)
        if scope == "project":
            return await self.project(scope_id)
        return False

    async def membership(self, m: Membership) -> bool:
        return await self.place(m.scope, m.scope_id)

    async def sees_person(self, person: Person) -> bool:
        """Someone with a place inside the walls (their places elsewhere stay unseen)."""
        if self.scope.cluster:
            return True
        return any([await self.membership(m) for m in await self.store.memberships(person.id)])

    async def governs_person(self, person: Person) -> bool:
        """Someone a tenant administrator may change: a member whose every place is inside the walls.

        A person who is also Beta's is Beta's administrators' too: suspending them would reach
        past the walls, so that is for a cluster administrator."""
        if self.scope.cluster:
            return True
        places = await self.store.memberships(person.id)
        return person.role == "member" and bool(places) and all([await self.membership(m) for m in places])

    async def project_ids(self) -> list[str] | None:
        """The tenant's projects, whose usage is all they read; None (every row) for the cluster's."""
        if self.scope.cluster:
            return None
        teams = {t.id for t in await self.store.list_teams() if self.scope.holds_team(t)}
        return [p.id for p in await self.store.list_projects() if p.team_id in teams]

    async def audit_entry(self, entry: AuditEntry) -> bool:
        """An entry about something inside: a key, a person, a place or its limits."""
        if self.scope.cluster:
            return True
        kind, _, ident = entry.target.partition(":")
        if kind == "key":
            return await self.key(ident)
        if kind == "person":
            person = await self.store.person_by_id(ident)
            return person is not None and await self.sees_person(person)
        return await self.place(kind, ident)


def places_said(scope: Scope) -> str:
    """The tenant's places, as a refusal of what only a cluster administrator does names them."""
    return ", ".join(scope.places)
