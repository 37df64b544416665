"""Keeping accounts in step with the directory: the leader reads it every auth.ldap.sync_interval.

For every account tied to the directory (an "ldap" identity) the sync looks
the person up by their immutable id, fifty ids to a search: someone gone,
no longer admitted by user_filter, or disabled there is suspended (their
sessions end, their keys are refused); someone enabled again is reinstated,
unless an administrator suspended them by hand; roles and the places the
directory gave follow their groups. The rules themselves are
DirectoryAccounts'; this module decides when, and guards against a mistake.

The guard: a sync that would suspend more than half of the directory's
accounts is refused, logged and changes nothing. A base_dn edited wrong, a
user_filter that names a group being renamed, or an OU moved would
otherwise lock the whole company out in one pass; a directory that cannot be
read is likewise never taken for an empty one.

Only the leader syncs (`leading`), and settings are read at each turn, so
turning the sync off or changing the interval needs no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from llmgw.account import AccountError, Actor
from llmgw.auth.directory import DirectoryAccounts, GroupMap
from llmgw.auth.directoryerror import DirectoryError
from llmgw.auth.secrets import SecretError, Secrets
from llmgw.config import AuthSettings
from llmgw.store import AuditEntry, AuditStore, PeopleStore, Person, StoreError

if TYPE_CHECKING:
    from llmgw.auth import ldap

log = logging.getLogger("llmgw.auth")

SYNC_ACTOR = Actor("directory", "ldap")
SYNC_TARGET = "directory:ldap"  # the audit target each sync's report is written under
IDLE_CHECK_S = 1.0  # how often an off, not-yet-due or following sync looks at the settings (in memory) again


def _leaves(seen: ldap.Seen) -> bool:
    return seen.found is None or seen.found.disabled


class _Store(PeopleStore, AuditStore, Protocol):
    """What LdapSync calls: people and their LDAP identities and places, and the audit it writes."""


class LdapSync:
    """The directory sync of one control plane; it runs only while `leading()`.

    `on_suspended(person)` is called for everyone the sync suspends or
    reinstates, so this plane's caches (API keys, chat credentials) forget
    them at once rather than after auth.cache_ttl."""

    def __init__(self, store: _Store, settings: Callable[[], AuthSettings], secrets: Secrets,
                 directory: DirectoryAccounts, leading: Callable[[], bool],
                 on_suspended: Callable[[Person], None] | None = None):
        self.store = store
        self._settings = settings
        self.secrets = secrets
        self.directory = directory
        self._leading = leading
        self._on_suspended = on_suspended
        self.last: dict[str, Any] | None = None  # the last report, for GET /api/v1/auth
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # a sync asked for by hand waits for one under way
        self._last_run = 0.0  # time.monotonic() of the last sync this plane ran

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="ldap-sync")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _due(self) -> float:
        """Seconds until the next sync is due (0: now); IDLE_CHECK_S while it is off or this plane follows."""
        settings = self._settings().ldap
        interval = float(settings.sync_interval)
        if not settings.enabled or interval <= 0 or not self._leading():
            return IDLE_CHECK_S
        return max(0.0, self._last_run + interval - time.monotonic()) if self._last_run else 0.0

    async def _loop(self) -> None:
        while True:
            wait = self._due()
            if wait > 0:
                await asyncio.sleep(min(wait, IDLE_CHECK_S))
                continue
            try:
                await self.run_once(SYNC_ACTOR)
            except (StoreError, AccountError) as e:
                log.error("the directory sync stopped part way: %s; it runs again in %s", e,
                          self._settings().ldap.sync_interval)
            except Exception:  # a bug must not end the loop: the next turn may well succeed
                log.exception("the directory sync failed")

    async def run_once(self, actor: Actor) -> dict[str, Any]:
        """One sync now, whatever the interval; returns its report (also kept as `.last`).

        The report: checked (accounts tied to the directory), suspended, reinstated and changed (their
        e-mails), refused (why nothing was changed, or None) and at (when, epoch seconds)."""
        async with self._lock:
            self._last_run = time.monotonic()
            report = await self._run(actor)
            self.last = report
            # Written down, so that every control plane and worker shows the last sync (GET /api/v1/auth,
            # /admin/sign-in), not only the leader that ran it; and who a sync suspended is in ctl audit.
            try:
                await self.store.add_audit(AuditEntry(at=report["at"], actor=actor.name, via=actor.via,
                                                      action="ldap.sync", target=SYNC_TARGET, after=report))
            except StoreError as e:
                log.warning("the directory sync's report was not written to the audit log: %s", e)
            return report

    async def _run(self, actor: Actor) -> dict[str, Any]:
        report: dict[str, Any] = {"checked": 0, "suspended": [], "reinstated": [], "changed": [],
                                  "refused": None, "at": time.time()}
        settings = self._settings().ldap
        if not settings.enabled:
            report["refused"] = "auth.ldap is off"
            return report
        # Here, not at the top: ldap3 costs every control plane's start 75 ms, and most never turn LDAP on.
        from llmgw.auth import ldap

        tied: dict[str, Person] = {}
        for identity in await self.store.list_identities(ldap.SOURCE):
            person = await self.store.person_by_id(identity.person_id)
            if person is not None:
                tied[identity.subject] = person
        report["checked"] = len(tied)
        if not tied:
            return report
        try:
            seen = await ldap.look_up(settings, self.secrets, list(tied))
        except (DirectoryError, SecretError) as e:
            report["refused"] = f"the directory could not be read: {e}"
            log.error("directory sync: nothing changed, %s", report["refused"])
            return report
        leaving = [s for s, p in tied.items() if not p.disabled and _leaves(seen[s])]
        if len(leaving) * 2 > len(tied):
            report["refused"] = (f"it would suspend {len(leaving)} of the {len(tied)} accounts tied to the "
                                 f"directory, more than half; check auth.ldap.base_dn and user_filter, then run "
                                 f"llmgw ctl auth sync")
            log.error("directory sync refused, nothing changed: %s", report["refused"])
            return report
        gmap = GroupMap.of(settings)
        for subject, person in tied.items():
            try:
                await self._one(person, seen[subject], gmap, actor, report)
            except AccountError as e:
                log.warning("directory sync: %s kept as it was: %s", person.email, e)
        log.info("directory sync: %d checked, %d suspended, %d reinstated, %d changed", report["checked"],
                 len(report["suspended"]), len(report["reinstated"]), len(report["changed"]))
        return report

    async def _one(self, person: Person, seen: ldap.Seen, gmap: GroupMap, actor: Actor,
                   report: dict[str, Any]) -> None:
        from llmgw.auth import ldap

        found = seen.found
        if found is None or found.disabled:
            why = "gone from the directory, or no longer admitted by auth.ldap.user_filter" if found is None \
                else "disabled in the directory"
            if await self.directory.suspend(person, ldap.SOURCE, actor=actor, why=why):
                report["suspended"].append(person.email)
                self._forget(person)
            return
        if await self.directory.reinstate(person, ldap.SOURCE, actor=actor):
            report["reinstated"].append(person.email)
            self._forget(person)
            person = await self.store.person_by_id(person.id) or person
        before = (person, await self._places(person))
        after = await self.directory.follow(person, found.vouched(seen.groups), gmap, actor=actor)
        if (after, await self._places(after)) != before:
            report["changed"].append(after.email)

    async def _places(self, person: Person) -> set[tuple[str, str]]:
        return {(m.scope, m.scope_id) for m in await self.store.memberships(person.id)}

    def _forget(self, person: Person) -> None:
        if self._on_suspended is not None:
            try:
                self._on_suspended(person)
            except Exception:
                log.exception("forgetting %s's cached keys failed", person.email)
