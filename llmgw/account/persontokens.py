"""A person's own tokens for the admin API: how a tenant administrator uses `llmgw people|keys|ctl` (issue 31).

The cluster's admin token is everything, and lives in a file only root reads
on a control plane. A tenant administrator instead holds a token of their own,
`llmgw-pat-` and 43 base62 characters, made on their profile page or by a
cluster administrator (`llmgw people token EMAIL`), shown once and kept only
as its sha256. It acts as its person with their scope as it is at each call
(scope.py): a grant taken away, or the person suspended, is in force at the
next command. A token of a person who administers nothing is refused, and so
is one of a cluster administrator: their power is the admin token's, kept in a
file on the control plane, and a token a portal session could mint must not
carry it.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from llmgw.account import keys as keymod
from llmgw.account.errors import AccountError, Actor
from llmgw.account.scope import Scope, scope_of
from llmgw.errors import N_
from llmgw.store import KeysStore, PeopleStore, Person, PersonToken

TOKEN_PREFIX = "llmgw-pat-"  # noqa: S105 - the prefix every such token has, not a token
# How stale a token's "last used" may be: a command is a few calls, and one write a minute is enough to see it.
TOUCH_EVERY_S = 60.0


def token_view(token: PersonToken) -> dict[str, Any]:
    return {"id": token.id, "prefix": token.prefix, "person_id": token.person_id, "created_at": token.created_at,
            "last_used_at": token.last_used_at, "revoked_at": token.revoked_at,
            "state": "revoked" if token.revoked_at is not None else "active"}


def looks_like_person_token(text: str) -> bool:
    return text.startswith(TOKEN_PREFIX) and keymod.looks_like_key(keymod.KEY_PREFIX + text[len(TOKEN_PREFIX):])


class _Store(KeysStore, PeopleStore, Protocol):
    """People, their memberships (for the scope) and their tokens."""


class PersonTokens:
    def __init__(self, store: _Store, audit: Any):
        self.store = store
        self._audit = audit

    async def make(self, actor: Actor, person: Person) -> tuple[dict[str, Any], str]:
        """A new token for `person`; its view and the secret, which is shown once and never kept."""
        scope = await scope_of(self.store, person)
        if scope is None:
            raise AccountError(N_("{email} administers nothing, so a token for the admin API would do nothing; "
                                  "make them an administrator first (llmgw people admin)"), 409, "conflict",
                               params={"email": person.email})
        if scope.cluster:
            raise AccountError(N_("{email} is a cluster administrator, who uses the admin token (llmgw ctl reads it "
                                  "from the admin-token file); tokens of one's own are for the administrators of "
                                  "orgs and teams"), 409, "conflict", params={"email": person.email})
        secret = TOKEN_PREFIX + keymod.new_secret()[len(keymod.KEY_PREFIX):]
        token = PersonToken(id=keymod.new_id("pat"), person_id=person.id, digest=keymod.digest(secret),
                            prefix=secret[:len(TOKEN_PREFIX) + keymod.SHOWN_CHARS], created_at=time.time())
        await self.store.add_person_token(token)
        view = token_view(token)
        await self._audit(actor, "person.token", f"person:{person.id}", None, view)
        return view, secret

    async def of(self, person: Person) -> list[dict[str, Any]]:
        return [token_view(t) for t in await self.store.person_tokens(person.id)]

    async def revoke(self, actor: Actor, person: Person, token_id: str) -> dict[str, Any]:
        """Revoke one of `person`'s tokens; another's token id is not found here."""
        if all(t.id != token_id for t in await self.store.person_tokens(person.id)):
            raise AccountError(N_("{email} has no token {token}"), 404, "not_found",
                               params={"email": person.email, "token": token_id})
        revoked = await self.store.revoke_person_token(token_id, time.time())
        assert revoked is not None, "a token just listed is there to revoke"
        await self._audit(actor, "person.token_revoke", f"person:{person.id}", None, token_view(revoked))
        return token_view(revoked)

    async def authenticate(self, secret: str) -> tuple[Person, Scope] | None:
        """The token's person and their scope now, or None for a token that is unknown, revoked, or whose
        person is suspended or administers nothing."""
        if not looks_like_person_token(secret):
            return None
        token = await self.store.person_token_by_digest(keymod.digest(secret))
        if token is None or token.revoked_at is not None:
            return None
        person = await self.store.person_by_id(token.person_id)
        scope = None if person is None else await scope_of(self.store, person)
        # Never the cluster's: a token is a tenant's, and one whose person was made an admin since is refused
        # rather than grown into the admin token, which a portal session could otherwise mint.
        if person is None or scope is None or scope.cluster:
            return None
        now = time.time()
        if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY_S:
            await self.store.touch_person_token(token.id, now)
        return person, scope
