"""SCIM Users: the provider's view of an account, kept beside it in the store.

A user's id is ours, and is also the identity (source "scim") that ties it
to the account, so DirectoryAccounts finds, ties and makes accounts for
SCIM exactly as for OIDC and LDAP: an existing account with the e-mail is
tied only when auth.scim.trust_email says the provider vouches for it, or
an administrator linked the userName to it; never the break-glass account.
Not the externalId: it is the provider's, optional (Okta need not send it)
and may be replaced, while an identity's subject must never change.
externalId and userName are kept in scim_users.

- userName, else the primary e-mail: the account's e-mail; name.formatted,
  else displayName, else given and family name: its name;
- active false suspends the account (its sessions end, its keys are
  refused); active true lifts a suspension SCIM made, never one an
  administrator made;
- DELETE suspends the account and unties it, leaving it in place: its
  usage, its keys' history and the audit name it, and spend already
  recorded must still add up. The same userName pushed again later takes
  the account back (DELETE leaves a link to it, as an administrator's is).
- the break-glass account and the last active admin are never suspended:
  409 (People.change keeps the admin), with nothing changed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from llmgw.auth.directory import Vouched, scim_name_link
from llmgw.auth.scim.errors import ScimError
from llmgw.auth.scim.filter import Compare, lookup, matches
from llmgw.auth.scim.patch import apply_patch
from llmgw.auth.scim.provisioning import ACTOR, SOURCE, Provisioning
from llmgw.auth.scim.resources import Query, boolean, resource_body, when
from llmgw.auth.scim.schemas import USER
from llmgw.errors import N_
from llmgw.store import Conflict, Identity, Person, ScimUser

# Kept in columns or the account, or never kept (a password: accounts SCIM makes have none).
_APART = {"id", "meta", "schemas", "username", "externalid", "active", "password", "groups"}
_MAX_NAME = 256


def _parsed(body: Any) -> tuple[str, str | None, dict[str, Any], bool | None]:
    body = resource_body(body)
    user_name = lookup(body, "userName")
    if not isinstance(user_name, str) or not user_name.strip() or len(user_name) > _MAX_NAME:
        raise ScimError(400, N_("a user needs a userName of 1-{most} characters"), scim_type="invalidValue",
                        params={"most": _MAX_NAME})
    external_id = lookup(body, "externalId")
    if external_id is not None and not isinstance(external_id, str):
        raise ScimError(400, N_("externalId is a string"), scim_type="invalidValue")
    active = lookup(body, "active")
    data = {k: v for k, v in body.items() if k.casefold() not in _APART and v is not None}
    return user_name.strip(), external_id, data, None if active is None else boolean(active, "active")


def _email(data: dict[str, Any], user_name: str) -> str:
    emails = lookup(data, "emails")
    if isinstance(emails, list):
        usable = [e for e in emails if isinstance(e, dict) and isinstance(e.get("value"), str) and "@" in e["value"]]
        primary = [e for e in usable if e.get("primary") is True or str(e.get("primary")).lower() == "true"]
        if primary or usable:
            return str((primary or usable)[0]["value"]).strip()
    return user_name if "@" in user_name else ""


def _name(data: dict[str, Any]) -> str:
    name = lookup(data, "name")
    if isinstance(name, dict):
        formatted = lookup(name, "formatted")
        if isinstance(formatted, str) and formatted.strip():
            return formatted.strip()
    display = lookup(data, "displayName")
    if isinstance(display, str) and display.strip():
        return display.strip()
    if isinstance(name, dict):
        parts = [lookup(name, p) for p in ("givenName", "familyName")]
        return " ".join(p.strip() for p in parts if isinstance(p, str) and p.strip())
    return ""


def _view(user: ScimUser) -> dict[str, Any]:
    """What the audit keeps of a SCIM user."""
    return {"id": user.id, "userName": user.user_name, "externalId": user.external_id}


def _taken_name(user_name: str) -> ScimError:
    return ScimError(409, N_("the userName {name} is already provisioned"), scim_type="uniqueness",
                     params={"name": user_name})


def _taken_email(email: str) -> ScimError:
    return ScimError(409, N_("{email} is already another account's e-mail"), scim_type="uniqueness",
                     params={"email": email})


class Users:
    def __init__(self, provisioning: Provisioning):
        self.p = provisioning
        self.store = provisioning.store

    def resource(self, user: ScimUser, person: Person, base: str) -> dict[str, Any]:
        extensions = [k for k in user.data if k.lower().startswith("urn:")]
        out: dict[str, Any] = {"schemas": [USER, *extensions], "id": user.id}
        if user.external_id:
            out["externalId"] = user.external_id
        out["userName"] = user.user_name
        out.update(user.data)
        out["active"] = not person.disabled
        out["meta"] = {"resourceType": "User", "created": when(user.created_at),
                       "lastModified": when(user.updated_at), "location": f"{base}/Users/{user.id}"}
        return out

    async def found(self, user_id: str) -> tuple[ScimUser, Person]:
        user = await self.store.scim_user(user_id)
        person = None if user is None else await self.store.person_by_id(user.person_id)
        if user is None or person is None:
            raise ScimError(404, N_("there is no user {id}"), params={"id": user_id[:100]})
        return user, person

    async def read(self, user_id: str, base: str) -> dict[str, Any]:
        return self.resource(*await self.found(user_id), base)

    async def search(self, query: Query, base: str) -> tuple[int, list[dict[str, Any]]]:
        where = query.where
        users: list[ScimUser]
        # The lookups a provider makes before each create go straight to their row.
        if isinstance(where, Compare) and where.op == "eq" and where.attr.urn is None \
                and len(where.attr.names) == 1 and isinstance(where.value, str) \
                and where.attr.names[0].casefold() in ("username", "id"):
            one = await (self.store.scim_user_by_name(where.value) if where.attr.names[0].casefold() == "username"
                         else self.store.scim_user(where.value))
            users = [] if one is None else [one]
        else:
            users = await self.store.list_scim_users()
        people = {p.id: p for p in await self.store.list_people()} if len(users) > 1 else {}
        found: list[dict[str, Any]] = []
        for user in users:
            person = people.get(user.person_id) or (await self.store.person_by_id(user.person_id)
                                                    if len(users) == 1 else None)
            if person is None:
                continue
            resource = self.resource(user, person, base)
            if where is None or matches(where, resource):
                found.append(resource)
        return len(found), found[query.start - 1:query.start - 1 + query.count]

    async def create(self, body: Any, base: str) -> dict[str, Any]:
        user_name, external_id, data, active = _parsed(body)
        email = _email(data, user_name)
        if not email:
            raise ScimError(400, N_("an account needs an e-mail: send emails, or a userName that is one"),
                            scim_type="invalidValue")
        if await self.store.scim_user_by_name(user_name) is not None:
            raise _taken_name(user_name)
        existing = await self.store.person_by_email(email)
        if existing is not None and await self.store.scim_user_of(existing.id) is not None:
            raise _taken_email(email)
        # An administrator's link to this userName, made after a refusal: it vouches for this one account.
        linked = await self.store.identity(SOURCE, scim_name_link(user_name))
        vouches = self.p.trusts_email() or (linked is not None and existing is not None
                                            and linked.person_id == existing.id)
        user_id = str(uuid.uuid4())
        now = time.time()
        vouched = Vouched(SOURCE, user_id, email, _name(data) or email, frozenset(), email_verified=vouches,
                          link_as=user_name)
        person = await self.p.directory.find(vouched, create=True, actor=ACTOR)
        if linked is not None and linked.person_id == person.id:
            await self.store.delete_identity(SOURCE, linked.subject)  # spent: the user's id ties it now
        user = ScimUser(user_id, person.id, user_name, external_id, data, now, now)
        try:
            await self.store.add_scim_user(user)
        except Conflict:
            await self.store.delete_identity(SOURCE, user_id)  # a racing create won: undo the tie
            raise _taken_name(user_name) from None
        await self.p.audit(ACTOR, "scim.user.create", f"person:{person.id}", None, _view(user))
        vouched = replace(vouched, groups=await self.p.group_names(person.id))
        person = await self._settle(person, vouched, True if active is None else active)
        return self.resource(user, person, base)

    async def replace(self, user_id: str, body: Any, base: str) -> dict[str, Any]:
        user, person = await self.found(user_id)
        user_name, external_id, data, active = _parsed(body)
        email = _email(data, user_name)
        if user_name.casefold() != user.user_name.casefold():
            other = await self.store.scim_user_by_name(user_name)
            if other is not None and other.id != user.id:
                raise _taken_name(user_name)
        if email and email.casefold() != person.email.casefold():
            other_person = await self.store.person_by_email(email)
            if other_person is not None and other_person.id != person.id:
                raise _taken_email(email)
        if active is False:
            # First: a refusal (the break-glass account, the last active admin) must leave the user as it was.
            await self.p.suspend(person, "active set to false by the SCIM provider")
            person = await self.store.person_by_id(person.id) or person
        after = replace(user, user_name=user_name, external_id=external_id, data=data,
                        updated_at=max(time.time(), user.updated_at))
        try:
            await self.store.update_scim_user(after)
        except Conflict:
            raise _taken_name(user_name) from None
        changed = sorted({k for k in user.data.keys() | data.keys() if user.data.get(k) != data.get(k)})
        if _view(after) != _view(user) or changed:
            await self.p.audit(ACTOR, "scim.user.update", f"person:{person.id}", _view(user),
                               _view(after) | {"changed": changed})
        vouched = Vouched(SOURCE, user.id, email, _name(data), await self.p.group_names(person.id))
        person = await self._settle(person, vouched, active)
        return self.resource(after, person, base)

    async def patch(self, user_id: str, body: Any, base: str) -> dict[str, Any]:
        current = await self.read(user_id, base)
        return await self.replace(user_id, apply_patch(current, body), base)

    async def delete(self, user_id: str) -> None:
        user, person = await self.found(user_id)
        await self.p.suspend(person, "deleted at the SCIM provider")
        await self.store.delete_identity(SOURCE, user.id)
        await self.store.delete_scim_user(user.id)  # and its group memberships
        # The account was this provider's: the same userName pushed again takes it back, as a link would.
        now = time.time()
        try:
            await self.store.add_identity(Identity(SOURCE, scim_name_link(user.user_name), person.id, now, now))
        except Conflict:
            pass
        await self.p.audit(ACTOR, "scim.user.delete", f"person:{person.id}", _view(user), None)
        fresh = await self.store.person_by_id(person.id)
        if fresh is not None:
            await self.p.follow_groups(fresh, user.id)  # in no SCIM group now: what they gave is taken back

    async def _settle(self, person: Person, vouched: Vouched, active: bool | None) -> Person:
        person = await self.p.directory.follow(person, vouched, self.p.gmap(), actor=ACTOR)
        if active is False:
            await self.p.suspend(person, "active set to false by the SCIM provider")
        elif active is True:
            await self.p.reinstate(person)
        return await self.store.person_by_id(person.id) or person
