"""Accounts a directory vouches for: found by the directory's own id, made, renamed, and moved with groups.

OIDC at sign-in, LDAP at sign-in and at every sync, and SCIM when a
provider pushes a change all come here, so the rules are kept once:

- an account is found by the directory's immutable id (an Identity); else
  an account with the same e-mail is taken over and tied to it; else one is
  made, when the settings allow, with no password of its own;
- a changed e-mail or name in the directory changes the account's;
- groups give the role (when `roles` maps any) and the places in the tree
  the `memberships` map names. A place the directory gave is taken away
  when the person leaves the group; a place given by hand never is;
- groups the directory did not say (None, Entra's "too many groups") leave
  the role and places as they were;
- a directory suspends and reinstates only its own suspensions: someone an
  administrator suspended by hand stays suspended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from llmgw.account import AccountError, Actor, People, person_view
from llmgw.account import keys as keymod
from llmgw.errors import N_
from llmgw.store import Conflict, Identity, Membership, Person, Store

log = logging.getLogger("llmgw.auth")

ROLE_ORDER = ("admin", "operator")  # the first whose groups match wins; none is "member"


class _Mapped(Protocol):
    # Read-only properties: the settings blocks are frozen dataclasses.
    @property
    def roles(self) -> dict[str, list[str]]: ...

    @property
    def memberships(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class GroupMap:
    """Which groups give a role and which a place in the tree, matched without regard to case."""

    roles: Mapping[str, Sequence[str]] = field(default_factory=dict)
    memberships: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: _Mapped) -> GroupMap:
        return cls(roles=settings.roles, memberships=settings.memberships)

    def role(self, groups: Iterable[str]) -> str | None:
        """The role the groups give, "member" when none does; None when no role is mapped at all."""
        if not self.roles:
            return None
        held = {g.casefold() for g in groups}
        for role in ROLE_ORDER:
            if any(g.casefold() in held for g in self.roles.get(role, ())):
                return role
        return "member"

    def places(self, groups: Iterable[str]) -> list[str]:
        held = {g.casefold() for g in groups}
        return sorted({place for group, place in self.memberships.items() if group.casefold() in held})


@dataclass(frozen=True)
class Vouched:
    """What a directory says of a person at sign-in or sync."""

    source: str  # oidc | ldap | scim
    subject: str  # its immutable id for them
    email: str
    name: str
    groups: frozenset[str] | None  # None: not said this time, so role and places stay as they were


class DirectoryAccounts:
    """The account side of OIDC, LDAP and SCIM. `audit` is the Accounts' audit writer."""

    def __init__(self, store: Store, people: People, audit: Callable[[Actor, str, str, Any, Any], Awaitable[None]]):
        self.store = store
        self.people = people
        self._write_audit = audit

    async def _audit(self, actor: Actor, action: str, person: Person, before: Any, after: Any) -> None:
        await self._write_audit(actor, action, f"person:{person.id}", before, after)

    # finding and making

    async def account(self, vouched: Vouched, gmap: GroupMap, *, create: bool, actor: Actor) -> Person:
        """The account `vouched` signs in to, made or taken over as needed, with its groups applied.

        AccountError 403 when there is none and `create` is off, or the account is suspended."""
        now = time.time()
        person = await self.find(vouched, create=create, actor=actor, now=now)
        person = await self.follow(person, vouched, gmap, actor=actor)
        if person.disabled:
            raise AccountError(N_("your account is suspended; ask an administrator"), 403, "forbidden")
        return person

    async def find(self, vouched: Vouched, *, create: bool, actor: Actor, now: float | None = None) -> Person:
        """The account tied to `vouched.subject`, else the one with its e-mail (tied now), else a new one."""
        now = time.time() if now is None else now
        tied = await self.store.identity(vouched.source, vouched.subject)
        if tied is not None:
            person = await self.store.person_by_id(tied.person_id)
            if person is not None:
                await self.store.touch_identity(vouched.source, vouched.subject, now)
                return person
        person = await self.store.person_by_email(vouched.email) if vouched.email else None
        if person is None:
            if not create:
                raise AccountError(N_("{email} has no account here, and accounts are not made at sign-in; "
                                      "ask an administrator to add you"), 403, "forbidden",
                                   params={"email": vouched.email or vouched.subject})
            person = await self._make(vouched, actor, now)
        try:
            await self.store.add_identity(Identity(vouched.source, vouched.subject, person.id, now, now))
        except Conflict:
            pass  # a concurrent sign-in tied it first: the same person
        await self._audit(actor, "person.link", person, None, {"source": vouched.source, "subject": vouched.subject})
        log.info("%s tied %s to %s", vouched.source, vouched.subject, person.email)
        return person

    async def _make(self, vouched: Vouched, actor: Actor, now: float) -> Person:
        if not vouched.email:
            raise AccountError(N_("the directory gave no e-mail address for {who}, and an account needs one"),
                               403, "forbidden", params={"who": vouched.subject})
        person = Person(id=keymod.new_id("usr"), email=vouched.email.strip(),
                        name=(vouched.name or vouched.email).strip()[:128], role="member",
                        password_hash=None, created_at=now)
        try:
            await self.store.add_person(person)
        except Conflict:
            found = await self.store.person_by_email(vouched.email)
            if found is None:
                raise
            return found
        await self._audit(actor, "person.create", person, None, person_view(person) | {"source": vouched.source})
        return person

    # keeping in step

    async def follow(self, person: Person, vouched: Vouched, gmap: GroupMap, *, actor: Actor) -> Person:
        """The account moved to what the directory says now: e-mail, name, role and places."""
        before = person
        changed = person
        if vouched.email and vouched.email.strip().casefold() != person.email.casefold():
            taken = await self.store.person_by_email(vouched.email)
            if taken is None:
                changed = replace(changed, email=vouched.email.strip())
            else:
                log.warning("%s says %s is now %s, but that e-mail is another account's; kept %s",
                            vouched.source, vouched.subject, vouched.email, person.email)
        if vouched.name and vouched.name.strip() and vouched.name.strip() != person.name:
            changed = replace(changed, name=vouched.name.strip()[:128])
        if vouched.groups is None:
            if gmap.roles or gmap.memberships:
                log.error("%s did not say which groups %s is in; their role (%s) and places are kept as they were",
                          vouched.source, person.email, person.role)
        else:
            role = gmap.role(vouched.groups)
            if role is not None and role != person.role:
                if person.role == "admin" and not await self._another_admin(person):
                    log.warning("%s's groups would make %s a %s, but they are the last active admin; kept",
                                vouched.source, person.email, role)
                else:
                    changed = replace(changed, role=role)
        if changed != before:
            await self.store.update_person(changed)
            await self._audit(actor, "person.directory", changed, person_view(before), person_view(changed))
        if vouched.groups is not None:
            await self.follow_places(changed, vouched.source, gmap.places(vouched.groups), actor=actor)
        return changed

    async def follow_places(self, person: Person, source: str, places: Sequence[str], *, actor: Actor) -> None:
        """Join `places` as given by `source`, and leave those `source` gave that are not among them."""
        wanted: dict[tuple[str, str], str] = {}
        for place in places:
            try:
                scope, scope_id, label = await self.people.resolve_place(place)
            except AccountError as e:
                log.warning("%s maps a group to %s: %s; make it with llmgw ctl tree add", source, place, e)
                continue
            wanted[(scope, scope_id)] = label
        held = await self.store.memberships(person.id)
        have = {(m.scope, m.scope_id) for m in held}
        now = time.time()
        for (scope, scope_id), label in wanted.items():
            if (scope, scope_id) not in have:
                await self.store.add_membership(Membership(person.id, scope, scope_id, now, given_by=source))
                await self._audit(actor, "person.join", person, None, {"place": label, "given_by": source})
        for m in held:
            if m.given_by == source and (m.scope, m.scope_id) not in wanted:
                await self.store.remove_membership(person.id, m.scope, m.scope_id)
                await self._audit(actor, "person.leave", person,
                                  {"place": await self.people.place_name(m), "given_by": source}, None)

    async def _another_admin(self, person: Person) -> bool:
        return any(p.role == "admin" and not p.disabled and p.id != person.id for p in await self.store.list_people())

    # suspending

    async def suspend(self, person: Person, source: str, *, actor: Actor, why: str) -> bool:
        """Suspend `person` as `source` says, ending their sessions; False when already suspended."""
        if person.disabled:
            return False
        after = replace(person, disabled=True, suspended_by=source)
        await self.store.update_person(after)
        await self.store.delete_sessions(person.id)
        await self._audit(actor, "person.suspend", after, person_view(person), person_view(after) | {"why": why})
        log.info("%s suspended %s: %s", source, person.email, why)
        return True

    async def reinstate(self, person: Person, source: str, *, actor: Actor) -> bool:
        """Lift a suspension `source` made; one made by hand (or by another directory) stays."""
        if not person.disabled or person.suspended_by != source:
            return False
        after = replace(person, disabled=False, suspended_by=None)
        await self.store.update_person(after)
        await self._audit(actor, "person.unsuspend", after, person_view(person), person_view(after))
        log.info("%s reinstated %s", source, person.email)
        return True
