"""What the users and the groups handlers share: the store, the directory's account rules, the audit, and
how a person's SCIM groups become their role and places."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from llmgw.account import Actor
from llmgw.auth.directory import DirectoryAccounts, GroupMap, Vouched
from llmgw.store import PeopleStore, Person, ScimStore

SOURCE = "scim"
ACTOR = Actor("scim", "scim")  # the audit's who: the provider, through the SCIM token


class _Store(PeopleStore, ScimStore, Protocol):
    """What SCIM's users and groups call: SCIM's records, and the people and identities beside them."""


@dataclass(frozen=True)
class Provisioning:
    store: _Store
    directory: DirectoryAccounts
    audit: Callable[[Actor, str, str, Any, Any], Awaitable[None]]
    gmap: Callable[[], GroupMap]  # auth.scim's roles and memberships, read at each change
    # Tells this process's key cache (and through it the other workers) that someone's keys are refused or
    # let in again, at once rather than after auth.cache_ttl, as the admin API's suspension does.
    keys_changed: Callable[[], None]
    # auth.scim.trust_email: the provider vouches for the e-mails it pushes, so one that is an existing
    # account's ties that account; off, only an administrator's link does (llmgw people link EMAIL scim NAME).
    trusts_email: Callable[[], bool]

    async def suspend(self, person: Person, why: str) -> None:
        if await self.directory.suspend(person, SOURCE, actor=ACTOR, why=why):
            self.keys_changed()

    async def reinstate(self, person: Person) -> None:
        if await self.directory.reinstate(person, SOURCE, actor=ACTOR):
            self.keys_changed()

    async def group_names(self, person_id: str) -> frozenset[str]:
        return frozenset(g.display_name for g in await self.store.scim_groups_of(person_id))

    async def follow_groups(self, person: Person, subject: str) -> Person:
        """The person's role and places moved to the SCIM groups they are in now."""
        vouched = Vouched(SOURCE, subject, "", "", await self.group_names(person.id))
        return await self.directory.follow(person, vouched, self.gmap(), actor=ACTOR)

    async def follow_people(self, person_ids: list[str]) -> None:
        for person_id in dict.fromkeys(person_ids):
            person = await self.store.person_by_id(person_id)
            user = await self.store.scim_user_of(person_id)
            if person is not None:
                await self.follow_groups(person, user.id if user is not None else person_id)
