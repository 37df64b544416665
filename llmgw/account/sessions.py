"""Portal sessions: signing in with a password, the cookie's token, and what it derives.

The browser holds a random token; the store keeps only its sha256 (the
session's id), so a copy of the store signs no one in. From the token come,
by HMAC, the form's CSRF value and the chat credential the chat page sends
to /v1, whose sha256 the store also keeps: neither needs a column of its own
secrets, and both die with the session.

A session ends when unused for auth.session_idle or auth.session_max after it
began, whichever comes first. Failed sign-ins are counted in the store per
account and per client address over auth.sign_in_window, so every control
plane and worker throttles the same guesser.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from llmgw.account.errors import AccountError
from llmgw.account.passwords import check_password, dummy_hash
from llmgw.config import AuthSettings
from llmgw.errors import N_
from llmgw.store import PeopleStore, Person, Session, SignInStore

CHAT_PREFIX = "llmgw-chat-"
# last_seen_at is written at most this often: a page costs one session read, not a write.
TOUCH_EVERY_S = 60.0
_AGENT_KEPT = 200  # characters of User-Agent kept, to tell one's sessions apart


@dataclass(frozen=True)
class SignedIn:
    """A new session: `token` goes into the cookie and is never kept."""

    person: Person
    session: Session
    token: str
    csrf: str
    chat_token: str


@dataclass(frozen=True)
class Current:
    """The signed-in person behind a cookie, as each page sees them."""

    person: Person
    session: Session
    csrf: str
    chat_token: str


def session_id(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def chat_digest(chat_token: str) -> bytes:
    """What the store keeps of a chat credential, and what /v1 looks it up by."""
    return hashlib.sha256(chat_token.encode()).digest()


def _derive(token: str, purpose: bytes) -> str:
    mac = hmac.new(token.encode(), purpose, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def csrf_of(token: str) -> str:
    return _derive(token, b"csrf")


def chat_token_of(token: str) -> str:
    return CHAT_PREFIX + _derive(token, b"chat")


def _email_key(email: str) -> str:
    return email.strip().casefold()


class _Store(PeopleStore, SignInStore, Protocol):
    """What Sessions calls: people and their sessions, and the failed sign-ins counted against them."""


class Sessions:
    COOKIE = "llmgw_session"

    def __init__(self, store: _Store, settings: Callable[[], AuthSettings], *,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self._settings = settings
        self._clock = clock

    async def sign_in(self, email: str, password: str, *, address: str, agent: str = "") -> SignedIn:
        """A new session for the right e-mail and password. One sentence (401) for an unknown
        e-mail, a wrong password and a suspended account, which cost the same scrypt and count alike;
        429 once the account or the address has failed too often within auth.sign_in_window."""
        settings = self._settings()
        if settings.oidc.enabled and settings.oidc.no_passwords and _email_key(email) != _email_key(
                settings.break_glass):
            # Before the password is read: it is neither checked nor counted, so the answer says nothing
            # of whether the account or the password exists.
            raise AccountError(N_("passwords are not used here; sign in with the single sign-on button"),
                               403, "forbidden")
        now = self._clock()
        account, place = f"account:{_email_key(email)}", f"address:{address}"
        await self._refuse_if_throttled(account, place, now)
        person = await self.store.person_by_email(email)
        stored = person.password_hash if person is not None else None
        matches = await asyncio.to_thread(check_password, password, stored or dummy_hash())
        # A suspended account is answered as a wrong password is, and counted: a different answer to the
        # right password confirmed a guess, and went uncounted by the throttle (issue 25).
        if person is None or stored is None or not matches or person.disabled:
            await self.store.add_sign_in_failure([account, place], now)
            raise AccountError(N_("that e-mail and password do not match an account here"),
                               401, "unauthorized")
        await self.store.clear_sign_in_failures(account)
        return await self.open(person, address=address, agent=agent)

    async def _refuse_if_throttled(self, account: str, place: str, now: float) -> None:
        settings = self._settings()
        since = now - float(settings.sign_in_window)
        if (await self.store.sign_in_failures(account, since) >= settings.sign_in_per_account
                or await self.store.sign_in_failures(place, since) >= settings.sign_in_per_address):
            raise AccountError(
                N_("too many failed sign-ins; wait {minutes} minutes and try again, "
                   "or ask an administrator to reset your password"),
                429, "rate_limited", params={"minutes": math.ceil(float(settings.sign_in_window) / 60)},
            )

    async def sign_in_vouched(self, login: str, vouch: Callable[[], Awaitable[Person]], *, address: str,
                              agent: str = "") -> SignedIn:
        """A new session for the person `vouch` names (a directory checked their password), under the
        same throttle as password sign-ins: a refusal of 401 from `vouch` counts as a failed sign-in for
        `login` and the address, so a guesser gets no more tries through the directory than here."""
        now = self._clock()
        account, place = f"account:{_email_key(login)}", f"address:{address}"
        await self._refuse_if_throttled(account, place, now)
        try:
            person = await vouch()
        except AccountError as e:
            if e.status == 401:
                await self.store.add_sign_in_failure([account, place], now)
            raise
        await self.store.clear_sign_in_failures(account)
        return await self.open(person, address=address, agent=agent)

    async def open(self, person: Person, *, address: str, agent: str = "") -> SignedIn:
        """A new session for a person already known to be who they say (after sign-up)."""
        now = self._clock()
        token = secrets.token_urlsafe(32)
        chat_token = chat_token_of(token)
        session = Session(
            id=session_id(token), person_id=person.id, created_at=now, last_seen_at=now,
            expires_at=now + float(self._settings().session_max), chat_digest=chat_digest(chat_token),
            address=address, agent=agent[:_AGENT_KEPT],
        )
        await self.store.add_session(session)
        await self._forget_ended(person.id, now)
        return SignedIn(person, session, token, csrf_of(token), chat_token)

    async def _forget_ended(self, person_id: str, now: float) -> None:
        """Delete the person's sessions that ended unseen (a closed browser never signs out):
        a person has a few, so their profile lists only live ones."""
        idle = float(self._settings().session_idle)
        for s in await self.store.list_sessions(person_id):
            if now >= s.expires_at or now - s.last_seen_at >= idle:
                await self.store.delete_session(s.id)

    async def current(self, token: str) -> Current | None:
        """The session behind the cookie's token, or None when there is none or it has ended."""
        if not token:
            return None
        session = await self.store.session_by_id(session_id(token))
        if session is None:
            return None
        now = self._clock()
        if now >= session.expires_at or now - session.last_seen_at >= float(self._settings().session_idle):
            await self.store.delete_session(session.id)
            return None
        person = await self.store.person_by_id(session.person_id)
        if person is None or person.disabled:
            await self.store.delete_session(session.id)
            return None
        if now - session.last_seen_at >= TOUCH_EVERY_S:
            await self.store.touch_session(session.id, now)
            session = replace(session, last_seen_at=now)
        return Current(person, session, csrf_of(token), chat_token_of(token))

    async def sign_out(self, token: str, *, everywhere: bool = False) -> None:
        """End this session, or with `everywhere` every session of its person."""
        session = await self.store.session_by_id(session_id(token)) if token else None
        if session is None:
            return
        if everywhere:
            await self.store.delete_sessions(session.person_id)
        else:
            await self.store.delete_session(session.id)
