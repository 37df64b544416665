"""Accounts a directory vouches for: found by the directory's own id, made, renamed, and moved with groups.

OIDC at sign-in, LDAP at sign-in and at every sync, and SCIM when a
provider pushes a change all come here, so the rules are kept once:

- an account is found by the directory's immutable id (an Identity); else,
  when the directory vouches for the e-mail (`Vouched.email_verified`), an
  account with the same e-mail is tied to it; else one is made, when the
  settings allow, with no password of its own. An e-mail nobody vouched for
  that is an existing account's is refused with how an administrator links
  the two on purpose (`link`, llmgw people link): otherwise anyone who can
  type an address into their profile at the provider takes that account
  over, the "nOAuth" pattern (issue 25);
- the break-glass account (auth.break_glass) is never tied, renamed,
  suspended, demoted or deleted by a directory: it is the way in when the
  directory is down or wrong;
- a changed e-mail or name in the directory changes the account's;
- groups give the role (when `roles` maps any) and the places in the tree
  the `memberships` map names. A place the directory gave is taken away
  when the person leaves the group; a place given by hand never is;
- groups the directory did not say (None, Entra's "too many groups") leave
  the role and places as they were;
- a directory suspends and reinstates only its own suspensions: someone an
  administrator suspended by hand stays suspended;
- every change goes through People.change, which keeps the last active admin.
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
from llmgw.store import Conflict, Identity, Membership, PeopleStore, Person, ScimStore

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
    # The directory vouches that the e-mail is this person's (OIDC: email_verified, or the claim the
    # administrator named, is the boolean true), so a first sign-in may be tied to the account with it.
    email_verified: bool = False
    # The id this person was tied by before it named its issuer (OIDC's bare sub): such a tie is moved over.
    former_subject: str = ""
    # What an administrator types to link this identity on purpose (llmgw people link EMAIL SOURCE THIS).
    link_as: str = ""


SOURCES = ("oidc", "ldap", "scim")
# A SCIM user's id is ours, made when the provider first pushes it, so a link made before is to its userName.
SCIM_USER_NAME = "userName:"

SUSPENDED = "suspended"  # AccountError.code of a suspended account's sign-in


def scim_name_link(user_name: str) -> str:
    """The identity subject an administrator's link to a SCIM userName not yet pushed is kept under."""
    return SCIM_USER_NAME + user_name.strip().casefold()


class _Store(PeopleStore, ScimStore, Protocol):
    """What DirectoryAccounts calls: people, their identities, places and sessions, and SCIM's users."""


class DirectoryAccounts:
    """The account side of OIDC, LDAP and SCIM. `audit` is the Accounts' audit writer; `break_glass` reads
    auth.break_glass, the account no directory may touch."""

    def __init__(self, store: _Store, people: People, audit: Callable[[Actor, str, str, Any, Any], Awaitable[None]],
                 *, break_glass: Callable[[], str]):
        self.store = store
        self.people = people
        self._write_audit = audit
        self._break_glass = break_glass

    async def _audit(self, actor: Actor, action: str, person: Person, before: Any, after: Any) -> None:
        await self._write_audit(actor, action, f"person:{person.id}", before, after)

    def is_break_glass(self, person: Person) -> bool:
        return person.email.strip().casefold() == self._break_glass().strip().casefold()

    def _break_glass_refusal(self, person: Person) -> AccountError:
        return AccountError(N_("{email} is the break-glass account (auth.break_glass), which no directory may "
                               "sign in to, tie, rename, suspend or delete; sign in to it with its password, and "
                               "give the directory's person another e-mail"), 409, "conflict",
                            params={"email": person.email})

    # finding and making

    async def account(self, vouched: Vouched, gmap: GroupMap, *, create: bool, actor: Actor) -> Person:
        """The account `vouched` signs in to, made or tied as needed, with its groups applied.

        AccountError 403 when there is none and `create` is off, or the account is suspended (code
        SUSPENDED); 409 when its e-mail is an existing account's the directory does not vouch for."""
        now = time.time()
        person = await self.find(vouched, create=create, actor=actor, now=now)
        person = await self.follow(person, vouched, gmap, actor=actor)
        if person.disabled:
            raise AccountError(N_("your account is suspended; ask an administrator"), 403, SUSPENDED)
        return person

    async def find(self, vouched: Vouched, *, create: bool, actor: Actor, now: float | None = None) -> Person:
        """The account tied to `vouched.subject`; else the one with its e-mail when the directory vouches
        for it (tied now); else a new one."""
        now = time.time() if now is None else now
        person = await self._tied(vouched, now)
        if person is not None:
            if self.is_break_glass(person):
                raise self._break_glass_refusal(person)  # tied before issue 25's rule; never signed in to now
            return person
        person = await self.store.person_by_email(vouched.email) if vouched.email else None
        if person is None:
            if not create:
                raise AccountError(N_("{email} has no account here, and accounts are not made at sign-in; "
                                      "ask an administrator to add you"), 403, "forbidden",
                                   params={"email": vouched.email or vouched.subject})
            person = await self._make(vouched, actor, now)
        else:
            self._may_tie(vouched, person)
        await self._tie(vouched.source, vouched.subject, person, actor, now)
        return person

    async def _tied(self, vouched: Vouched, now: float) -> Person | None:
        tied = await self.store.identity(vouched.source, vouched.subject)
        if tied is None and vouched.former_subject:
            tied = await self.store.identity(vouched.source, vouched.former_subject)
            if tied is not None:
                # Moved to the id that names its issuer, so that another provider's same subject is no one's.
                await self._move_tie(vouched, tied.person_id, now)
        if tied is None:
            return None
        person = await self.store.person_by_id(tied.person_id)
        if person is not None:
            await self.store.touch_identity(vouched.source, vouched.subject, now)
        return person

    async def _move_tie(self, vouched: Vouched, person_id: str, now: float) -> None:
        try:
            await self.store.add_identity(Identity(vouched.source, vouched.subject, person_id, now, now))
        except Conflict:
            pass
        await self.store.delete_identity(vouched.source, vouched.former_subject)

    def _may_tie(self, vouched: Vouched, person: Person) -> None:
        """Refuse to tie `vouched` to the existing account with its e-mail unless the directory vouches for it."""
        if self.is_break_glass(person):
            raise self._break_glass_refusal(person)
        if not vouched.email_verified:
            log.warning("%s's %s says %s, which is an existing account's, but does not vouch for it; refused",
                        vouched.source, vouched.subject, vouched.email)
            raise AccountError(N_("{email} already has an account here, and the directory does not vouch that "
                                  "this e-mail is yours, so it was not signed in to; an administrator can link the "
                                  "two on that person's page under Admin, People, or with: llmgw people link "
                                  "{email} {source} '{subject}'"), 409, "conflict",
                               params={"email": person.email, "source": vouched.source,
                                       "subject": vouched.link_as or vouched.subject})

    async def _tie(self, source: str, subject: str, person: Person, actor: Actor, now: float) -> None:
        try:
            await self.store.add_identity(Identity(source, subject, person.id, now, now))
        except Conflict:
            pass  # a concurrent sign-in tied it first: the same person
        await self._audit(actor, "person.link", person, None, {"source": source, "subject": subject})
        log.info("%s tied %s to %s", source, subject, person.email)

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
            self._may_tie(vouched, found)  # made a moment ago by someone else: the same rule as if it had been
            return found
        await self._audit(actor, "person.create", person, None, person_view(person) | {"source": vouched.source})
        return person

    async def link(self, actor: Actor, ident: str, source: str, subject: str) -> dict[str, Any]:
        """Tie a directory's identity to an account on purpose: what an administrator does when a sign-in
        was refused because the directory does not vouch for the e-mail. For SCIM, `subject` is the userName
        the provider will push. The break-glass account is refused."""
        person = await self.people.person(ident)
        if source not in SOURCES:
            raise AccountError(N_('"{source}" is not a directory; those are {sources}'),
                               params={"source": source, "sources": ", ".join(SOURCES)})
        subject = subject.strip()
        if not subject or len(subject) > 1024:
            raise AccountError(N_("a link needs the directory's id for the person: the one the refused sign-in's "
                                  "sentence names"))
        if self.is_break_glass(person):
            raise self._break_glass_refusal(person)
        key = scim_name_link(subject) if source == "scim" else subject
        if source == "scim" and (user := await self.store.scim_user_by_name(subject)) is not None:
            pushed = await self.store.person_by_id(user.person_id)
            raise AccountError(N_("the SCIM provider has pushed {subject} already, as {email}; delete that user "
                                  "at the provider, link, then let it push the user again"), 409, "conflict",
                               params={"subject": subject, "email": pushed.email if pushed else user.person_id})
        tied = await self.store.identity(source, key)
        if tied is not None and tied.person_id != person.id:
            other = await self.store.person_by_id(tied.person_id)
            raise AccountError(N_("{source} {subject} is already tied to {email}; it can be tied to one account"),
                               409, "conflict", params={"source": source, "subject": subject,
                                                        "email": other.email if other else tied.person_id})
        if tied is None:
            await self._tie(source, key, person, actor, time.time())
        return await self.people.show(person.id)

    # keeping in step

    async def follow(self, person: Person, vouched: Vouched, gmap: GroupMap, *, actor: Actor) -> Person:
        """The account moved to what the directory says now: e-mail, name, role and places; the break-glass
        account as it was."""
        if self.is_break_glass(person):
            log.warning("%s says %s changed, but %s is the break-glass account, which no directory changes; kept",
                        vouched.source, vouched.subject, person.email)
            return person
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
            await self.people.change(actor, "person.directory", before, changed)
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
        """Suspend `person` as `source` says, ending their sessions; False when already suspended.

        AccountError for the break-glass account, and (People.change) for the last active admin."""
        if person.disabled:
            return False
        if self.is_break_glass(person):
            raise self._break_glass_refusal(person)
        after = replace(person, disabled=True, suspended_by=source)
        await self.people.change(actor, "person.suspend", person, after, {"why": why})
        await self.store.delete_sessions(person.id)
        log.info("%s suspended %s: %s", source, person.email, why)
        return True

    async def reinstate(self, person: Person, source: str, *, actor: Actor) -> bool:
        """Lift a suspension `source` made; one made by hand (or by another directory) stays."""
        if not person.disabled or person.suspended_by != source or self.is_break_glass(person):
            return False
        after = replace(person, disabled=False, suspended_by=None)
        await self.people.change(actor, "person.unsuspend", person, after)
        log.info("%s reinstated %s", source, person.email)
        return True
