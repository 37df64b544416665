"""The portal's chat credential as /v1 sees it: a session's person, in one of their projects.

The chat page sends `llmgw-chat-…`, derived from the session's cookie token
(account/sessions.py), so it lives exactly as long as the session. Like an
API key it is looked up from memory, with a store read per miss, and the
answer is kept for `auth.cache_ttl`: a session signed out, ended or whose
person was suspended is refused within that time on every control plane.

The answer is a Principal shaped like a key's, so rate limits, budgets and
guardrails treat a chat request as they treat a key's: its key is
`chat_<person id>` (the usage rows' key_id), named "portal chat", with the
chosen project's chain of limits above it and no key level of its own.

Which project: the `x-llmgw-project` header (a project's id or its path
ORG/TEAM/PROJECT), or with none the first of the person's projects by path.
A project that is not the person's is refused with 403, not treated as an
unknown credential: the credential is good, the place is not.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from llmgw.account.errors import AccountError
from llmgw.account.keycache import Principal
from llmgw.account.limits import effective
from llmgw.account.people import People
from llmgw.account.sessions import CHAT_PREFIX, TOUCH_EVERY_S, chat_digest
from llmgw.config import AuthSettings
from llmgw.errors import N_
from llmgw.store import ApiKey, KeysStore, PeopleStore, Person, ProjectPath, Session, StoreError

CHAT_KEY_NAME = "portal chat"
MAX_UNKNOWN = 10_000  # credentials remembered as unknown; bounded so random ones cannot fill memory
# Credentials remembered as known. A closed browser never says so, so its entry would stay for good:
# past this many, the expired ones go, then the oldest.
MAX_KNOWN = 10_000


def chat_key_id(person_id: str) -> str:
    """The key id a person's chat requests are counted under."""
    return f"chat_{person_id}"


@dataclass
class _Entry:
    """What one read of the store said about a credential, and until when it is believed."""

    until: float
    session: Session
    person: Person
    projects: list[ProjectPath]
    read_at: float
    seen: float  # the session's last use known here: the store's, or this process's touch
    principals: dict[str, Principal] = field(default_factory=dict)  # by project id, made on first use


class _Store(KeysStore, PeopleStore, Protocol):
    """What ChatTokens reads: the session and its person, and the limits of the keys' places."""


class ChatTokens:
    def __init__(self, store: _Store, ttl: Callable[[], float], *,
                 idle: Callable[[], float] | None = None, clock: Callable[[], float] = time.time):
        self.store = store
        self._ttl = ttl
        default_idle = float(AuthSettings().session_idle)
        self._idle = idle or (lambda: default_idle)
        self._clock = clock
        self._people = People(store, _no_audit)
        self._known: dict[bytes, _Entry] = {}
        self._unknown: OrderedDict[bytes, float] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[_Entry | None]] = {}
        self.store_reads = 0

    def remembers(self, secret: str) -> bool:
        """True when a lookup would be answered from memory, without the store."""
        d = chat_digest(secret)
        now = self._clock()
        hit = self._known.get(d)
        if hit is not None and hit.until > now:
            return True
        until = self._unknown.get(d)
        return until is not None and until > now

    async def lookup(self, secret: str, project_id: str | None) -> Principal | None:
        """The credential's principal in the chosen project, or None when it is unknown or its session
        has ended. Raises AccountError (403) for a project that is not the person's, and StoreError
        when the store cannot be read."""
        if not secret.startswith(CHAT_PREFIX):
            return None
        d = chat_digest(secret)
        now = self._clock()
        entry = await self._entry(d, now)
        if entry is not None and self._ended(entry, now) and entry.read_at < now:
            # It looked ended from memory, but the portal's pages may have used the session since: ask the store.
            entry = await self._entry(d, now, fresh=True)
        if entry is None:
            return None
        if self._ended(entry, now):
            self._remember(d, None, now)  # one store read per auth.cache_ttl for a credential that keeps coming
            return None
        path = _choose(entry.projects, project_id)
        principal = entry.principals.get(path.project.id)
        if principal is None:
            principal = entry.principals[path.project.id] = await self._principal(entry.person, path)
        if now - entry.seen >= TOUCH_EVERY_S:
            # Chatting is using the session: without this an hour of chat would end it as idle.
            entry.seen = now
            try:
                await self.store.touch_session(entry.session.id, now)
            except StoreError:
                pass  # the next use tries again; the request need not fail for it
        return principal

    async def for_work(self, person_id: str, project_id: str) -> Principal | None:
        """The principal a person's chat credential has in a project, for work it left to run later: a workflow run
        made on the portal's page, which the leader starts after the request that made it has ended and which has
        no key row to read. None when the person is gone or suspended, or no longer a member of the project (as a
        key's run fails when its key is revoked). Read from the store each time; the caller keeps the answer."""
        person = await self.store.person_by_id(person_id)
        if person is None or person.disabled:
            return None
        for path in await self._people.projects_of(person.id):
            if path.project.id == project_id:
                return await self._principal(person, path)
        return None

    def _ended(self, entry: _Entry, now: float) -> bool:
        """Sessions' own rule (Sessions.current): past its absolute end, or unused for auth.session_idle."""
        return (now >= entry.session.expires_at or now - entry.seen >= self._idle()
                or entry.person.disabled)

    async def _entry(self, d: bytes, now: float, *, fresh: bool = False) -> _Entry | None:
        if not fresh:
            hit = self._known.get(d)
            if hit is not None and hit.until > now:
                return hit
            until = self._unknown.get(d)
            if until is not None and until > now:
                return None
        pending = self._inflight.get(d)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = asyncio.get_running_loop().create_future()
        self._inflight[d] = pending
        try:
            result = await self._read(d, now)
        except BaseException as e:
            pending.set_exception(e if isinstance(e, StoreError) else StoreError(
                "the chat credential's lookup was interrupted; try again"))
            pending.exception()  # marked retrieved: each waiter re-raises it itself
            raise
        finally:
            self._inflight.pop(d, None)
        self._remember(d, result, now)
        pending.set_result(result)
        return result

    async def _read(self, d: bytes, now: float) -> _Entry | None:
        self.store_reads += 1
        session = await self.store.session_by_chat_digest(d)
        if session is None:
            return None
        person = await self.store.person_by_id(session.person_id)
        if person is None:
            return None
        projects = await self._people.projects_of(person.id)
        return _Entry(now + self._ttl(), session, person, projects, now, session.last_seen_at)

    async def _principal(self, person: Person, path: ProjectPath) -> Principal:
        chain = [
            await self.store.get_limits("org", path.org.id),
            await self.store.get_limits("team", path.team.id),
            await self.store.get_limits("project", path.project.id),
            None,  # no key level: a person's chat is limited by the project's chain alone
        ]
        key = ApiKey(id=chat_key_id(person.id), name=CHAT_KEY_NAME, project_id=path.project.id, digest=b"",
                     prefix="chat", person_id=person.id)
        return Principal(key, path, effective(chain))

    def _remember(self, d: bytes, entry: _Entry | None, now: float) -> None:
        if entry is not None:
            self._known.pop(d, None)  # re-inserted last, so the oldest stay first in line to go
            self._known[d] = entry
            self._unknown.pop(d, None)
            if len(self._known) > MAX_KNOWN:
                for old in [k for k, e in self._known.items() if e.until <= now]:
                    del self._known[old]
                while len(self._known) > MAX_KNOWN:
                    del self._known[next(iter(self._known))]
            return
        self._known.pop(d, None)
        self._unknown[d] = now + self._ttl()
        self._unknown.move_to_end(d)
        while len(self._unknown) > MAX_UNKNOWN:
            self._unknown.popitem(last=False)

    def clear(self) -> None:
        """After a limits or membership change: every cached chain and project list may be out of date."""
        self._known.clear()
        self._unknown.clear()


def _choose(projects: list[ProjectPath], wanted: str | None) -> ProjectPath:
    """The project a chat request is in: the one named (by id or path), else the person's first."""
    if not projects:
        raise AccountError(N_("you are not a member of any project, so chat has nowhere to send requests; "
                              "ask an administrator to add you to one"), 403, "forbidden")
    if not wanted:
        return projects[0]
    for path in projects:
        if wanted in (path.project.id, str(path)):
            return path
    raise AccountError(N_("you are not a member of the project {project}; choose one of your own projects"),
                       403, "forbidden", params={"project": wanted})


async def _no_audit(*_: object) -> None:
    """People is used here only to read memberships, which audits nothing."""
