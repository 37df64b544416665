"""The cluster's settings: one document in the store, applied live on every control plane.

Each control plane asks the store for the document's version every
`control.settings_poll` (2 s) — one indexed read of one row — and reloads
only when it moved, so a change made on any control plane is in force on
all of them within 5 s. server.yaml's cluster keys only seed a store that
has no settings yet (`server init` does, adding the baseline guardrails, or
else the first control plane to start); after that the store is the truth,
and a server.yaml that disagrees is named in the log so nobody edits the
wrong place.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from llmgw.account import Actor
from llmgw.config import (
    MACHINE_KEYS,
    ClusterSettings,
    ConfigError,
    Invalid,
    ServerConfig,
    check_settings_key_files,
    from_dict,
    get_path,
    own_secrets,
    set_path,
    to_dict,
    unset_path,
)
from llmgw.errors import N_, ExpectedError
from llmgw.guard import check_detectors
from llmgw.store import AuditEntry, AuditStore, Conflict, Settings, SettingsStore, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.settings")


class SettingsError(ExpectedError, ValueError):
    """A refused settings change, as a sentence; `status` is the HTTP status that fits it.

    Its template and params say it in another language (the portal). A
    refusal of one key keeps that key apart in `key`: str() is "key: sentence",
    as the CLI and the admin API print it, while the template is the sentence alone.
    """

    def __init__(self, message: str, status: int = 400, code: str = "invalid_settings", *,
                 params: Mapping[str, object] | None = None, key: str = ""):
        super().__init__(message, params=params)
        self.status = status
        self.code = code
        self.key = key
        if key:
            self.args = (f"{key}: {self.args[0]}",)


class _Store(SettingsStore, AuditStore, Protocol):
    """What the cluster's settings call: the settings document, and the audit its changes write."""


class ClusterSettingsWatcher:
    def __init__(self, store: _Store):
        self.store = store
        self.current = ClusterSettings()
        self.version = 0
        self._listeners: list[Callable[[ClusterSettings], None]] = []
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, listener: Callable[[ClusterSettings], None]) -> None:
        self._listeners.append(listener)

    async def load(self, seed: ClusterSettings, seeded_keys: list[str]) -> None:
        """At start: read the store's settings, or write server.yaml's into a new store."""
        stored = await self.store.get_settings()
        if stored is None:
            await seed_settings(self.store, seed, "server.yaml", "system")
            stored = await seeded_settings(self.store)
        self._apply(stored.doc, stored.version)
        # Just seeded, they agree; later, the store's win and the file is out of date.
        for key in seeded_keys:
            if getattr(seed, key) != getattr(self.current, key):
                log.warning(
                    "server.yaml sets %s, but the cluster's settings in the store say otherwise and "
                    "win; change it with: llmgw ctl config set %s …", key, key)

    def start(self, poll: Callable[[], float]) -> None:
        self._task = asyncio.create_task(self._watch(poll), name="settings")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _watch(self, poll: Callable[[], float]) -> None:
        while True:
            await asyncio.sleep(poll())
            await self.refresh()

    async def refresh(self) -> None:
        try:
            version = await self.store.settings_version()
            if version == self.version:
                return
            stored = await self.store.get_settings()
        except StoreError as e:
            log.debug("settings not checked: %s", e)
            return
        if stored is not None:
            self._apply(stored.doc, stored.version)

    def _apply(self, doc: dict[str, Any], version: int) -> None:
        try:
            settings = from_dict(ClusterSettings, doc)
        except ConfigError as e:
            # Written by a newer llmgw, perhaps: keep what we run with rather than fall over.
            log.error("the cluster's settings version %d cannot be used here (%s); keeping version %d",
                      version, e, self.version)
            self.version = version
            return
        changed = version != self.version
        self.current, self.version = settings, version
        if changed:
            log.info("cluster settings version %d in force", version)
            for listener in self._listeners:
                listener(settings)

    # changes, as the admin API makes them

    async def document(self) -> tuple[int, dict[str, Any]]:
        stored = await self.store.get_settings()
        if stored is None:
            return 0, to_dict(ClusterSettings())
        return stored.version, stored.doc

    async def get(self, path: str | None) -> Any:
        version, doc = await self.document()
        if not path:
            return version, doc
        try:
            value = get_path(from_dict(ClusterSettings, doc), path)
        except ConfigError as e:
            raise SettingsError(e.template, 404, "unknown_key", params=e.params or None) from None
        if hasattr(value, "__dataclass_fields__"):
            value = to_dict(value)
        elif isinstance(value, list):
            value = [to_dict(v) if hasattr(v, "__dataclass_fields__") else _plain(v) for v in value]
        else:
            value = _plain(value)
        return version, value

    async def change(self, actor: str, via: str, *, set_: dict[str, str] | None = None,
                     unset: list[str] | None = None, whole: dict[str, Any] | None = None,
                     expected_version: int | None = None,
                     check: Callable[[ClusterSettings], None] | None = None) -> tuple[int, dict[str, Any]]:
        """Write a change; `check` refuses what only this machine can judge (its own secret files)
        by raising the loader's Invalid, before anything is written."""
        for path in [*(set_ or {}), *(unset or [])]:
            top = path.split(".")[0].split("[")[0]
            if top in MACHINE_KEYS:
                raise SettingsError(
                    N_("{path} is this machine's own setting, kept in its server.yaml, not one of the cluster's; "
                       'edit server.yaml on that machine and restart llmgw server'), params={"path": path})
        version, before = await self.document()
        if expected_version is not None and expected_version != version:
            raise SettingsError(
                N_("the cluster's settings changed since you read them (version {expected_version}, now {version}); "
                   'read them again'),
                409, "conflict", params={"expected_version": expected_version, "version": version})
        try:
            if whole is not None:
                after = to_dict(from_dict(ClusterSettings, whole))
            else:
                after = before
                for path, raw in (set_ or {}).items():
                    after = set_path(ClusterSettings, after, path, raw)
                for path in unset or []:
                    after = unset_path(ClusterSettings, after, path)
                after = to_dict(from_dict(ClusterSettings, after))
            if check is not None:
                check(from_dict(ClusterSettings, after))
        except (ConfigError, Invalid) as e:
            raise _refused(e) from None
        if after == before:
            return version, before
        try:
            stored = await self.store.put_settings(after, version, f"{actor} via {via}")
        except Conflict as e:
            raise SettingsError(N_("{conflict}"), 409, "conflict", params={"conflict": str(e)}) from None
        await self.store.add_audit(AuditEntry(
            at=time.time(), actor=actor, via=via, action="config.set", target="cluster-settings",
            before=_changed(before, after), after=_changed(after, before)))
        self._apply(stored.doc, stored.version)
        return stored.version, stored.doc


async def validated_change(settings: ClusterSettingsWatcher, cfg: ServerConfig, actor: Actor, *,
                           set_: dict[str, str] | None = None, unset: list[str] | None = None,
                           whole: dict[str, Any] | None = None,
                           expected_version: int | None = None) -> tuple[int, dict[str, Any]]:
    """A change to the cluster's settings, checked as every caller must (the admin API, the portal).

    Beyond the loader's rules, it refuses what only this machine can judge:
    a provider key file this machine may not read or that holds its own
    secrets, and a guardrail naming a detector no installed plugin gives.
    Refusals are SettingsError; the answer is the new (version, document).
    """
    own = own_secrets(cfg)

    def check(candidate: ClusterSettings) -> None:
        check_settings_key_files(candidate, own)
        check_detectors(candidate.guard)

    return await settings.change(actor.name, actor.via, set_=set_, unset=unset, whole=whole,
                                 expected_version=expected_version, check=check)


def _refused(e: ConfigError | Invalid) -> SettingsError:
    """A loader refusal as a SettingsError, keeping the validate() template apart from its key to translate."""
    if isinstance(e, Invalid):
        return SettingsError(e.template, params=e.params or None, key=e.key)
    if e.problem is not None:
        return SettingsError(e.problem.template, params=e.problem.params or None, key=e.key)
    return SettingsError(e.template, params=e.params or None)


async def seed_settings(store: _Store, settings: ClusterSettings, actor: str, via: str) -> bool:
    """Write a store's first settings; False when it has some already, which are left as they are.

    `server init` seeds the store with server.yaml's settings and the
    baseline guardrails; a control plane that starts on a store with none
    seeds it with its server.yaml's. Two seeding at once is no error: the
    first wins and the other reads what it wrote.
    """
    if await store.get_settings() is not None:
        return False
    doc = to_dict(settings)
    try:
        await store.put_settings(doc, 0, actor)
    except Conflict:
        return False
    await store.add_audit(AuditEntry(at=time.time(), actor=actor, via=via, action="config.seed",
                                     target="cluster-settings", before=None, after=doc))
    return True


async def seeded_settings(store: _Store) -> Settings:
    """The settings seed_settings wrote, or found written by whoever seeded first."""
    stored = await store.get_settings()
    if stored is None:
        # Only a store that lost a row it had committed, or a person deleting it in between, gets here.
        raise SettingsError(N_("the cluster's settings were written to the store but are not there now; "
                            "is something else changing this store?"), 500, "settings_missing")
    return stored


def _plain(value: Any) -> Any:
    # Duration and Size print as "10s" and "256MB"; keep them readable. A key not set stays None (null):
    # None once fell in here too and answered the string "None".
    if isinstance(value, (int, float, str, bool)) and type(value) not in (int, float, str, bool):
        return str(value)
    return value


def _changed(doc: dict[str, Any], other: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Only the keys that differ, so an audit entry says what changed, not the whole document."""
    out: dict[str, Any] = {}
    for key in sorted(set(doc) | set(other)):
        a, b = doc.get(key), other.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(_changed(a, b, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = a
    return out
