"""The endpoint registry: every model the router can serve and where its requests can go.

Built from the cluster's settings (static `endpoints`, outside providers)
and rebuilt whenever they change; an endpoint that survives a rebuild keeps
its live state (in flight, latency, breaker), so a settings change does not
make the router forget what it has learned. The cluster work fills the same
registry from agents' ready replicas.

Provider keys are read from files on the control plane, never from the
settings: a file is looked at again every couple of seconds and re-read when
it changed, so a rotated key needs no restart; one that cannot be read
leaves its endpoint out (said once in the log) until it can.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmgw.config import ClusterSettings, KeyFileRefused, ModelSettings, OwnSecrets, read_key_file
from llmgw.protocol import CachedBlocks
from llmgw.router.endpoint import Endpoint
from llmgw.router.prefixindex import PrefixIndex
from llmgw.router.prompttokens import NoTokenizer, PromptTokens

log = logging.getLogger("llmgw.registry")

TOKENIZER_RETRY_S = 30.0


@dataclass
class ModelEntry:
    settings: ModelSettings
    endpoints: list[Endpoint] = field(default_factory=list)
    catalog: str = ""  # the catalog model this is (an alias's own model); "" for one from the settings
    on_demand: bool = False  # the catalog loads it when a request asks for it
    stopped: bool = False  # stopped by an administrator (`llmgw ctl model stop`)
    tokenizer: str = ""  # where its tokenizer is, for routing by what each replica has cached

    @property
    def name(self) -> str:
        return self.settings.name

    def usable(self) -> list[Endpoint]:
        """Endpoints that can be sent to: a provider key that could not be read is left out."""
        return [e for e in self.endpoints if e.key_file is None or e.api_key is not None]

    def failing(self) -> bool:
        """Every endpoint it has is passed over by its breaker now (none half-open and free to try).
        A model with no endpoint at all is not failing: it has nothing yet (loading, a key file unread)."""
        usable = self.usable()
        return bool(usable) and not any(e.breaker.available() for e in usable)

    def retry_in(self) -> float:
        """Seconds until one of its endpoints may be tried again (0: one may be now)."""
        waits = [e.breaker.retry_in() for e in self.usable()]
        return min(waits, default=0.0)

    def failing_reason(self) -> str:
        """The last failure of an endpoint that is passed over, for the sentence that refuses a request."""
        reasons = [e.breaker.last_reason for e in self.usable() if e.breaker.last_reason]
        return reasons[-1] if reasons else "its requests failed"


@dataclass
class _KeyFile:
    path: str
    stamp: tuple[float, int] | None = None  # (mtime, size) when last read
    value: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class Placed:
    """A catalog model's replicas that are ready, as the reconciler found them: (shard id, base URL) each."""

    settings: ModelSettings
    replicas: tuple[tuple[str, str], ...] = ()
    api_key: str | None = field(default=None, repr=False)  # the key the cluster's engines are started with
    upstream: str = ""  # the name the engines serve it under (an alias's model); "" is settings.name
    on_demand: bool = False
    stopped: bool = False
    engines: tuple[tuple[str, str], ...] = ()  # (shard id, engine) of each replica, for its traces
    tokenizer: str = ""  # a folder on the control plane with its tokenizer.json, for routing by cache


# A registry told of no secret files still never reads the agent's own (OwnSecrets' default); frozen, so
# one shared default is safe.
_NO_FILES_OF_ITS_OWN = OwnSecrets()


class Registry:
    def __init__(self, own_secrets: OwnSecrets = _NO_FILES_OF_ITS_OWN) -> None:
        # This machine's own secret files: never read as a provider's key (config/keyfiles.py).
        self.own_secrets = own_secrets
        self.models: dict[str, ModelEntry] = {}
        self._endpoints: dict[str, Endpoint] = {}
        self._key_files: dict[str, _KeyFile] = {}
        self._settings: ClusterSettings | None = None
        self._placed: dict[str, Placed] = {}
        # What the reconciler said on its last pass, by catalog model: why placement waits for
        # room, and where a replica is loading and how far along. Read by requests waiting for a load.
        self.waits: dict[str, str] = {}
        self.loading: dict[str, str] = {}
        self._changed: asyncio.Event | None = None
        # Called (endpoint id, reason) when an endpoint's breaker opens on what this process saw.
        self.on_trip: Callable[[str, str], None] | None = None
        # What each replica's engine holds in its prefix cache, from the agents through the leader.
        self.prefix = PrefixIndex()
        self._placed_shards: set[str] = set()
        self._tokenizers: dict[str, tuple[PromptTokens | None, float | None]] = {}  # folder -> (read, failed at)

    def cached_blocks(self, message: CachedBlocks) -> None:
        """A replica's engine stored and evicted these blocks (docs/routing.md)."""
        # Taken before the replica is placed too: its agent follows it from the moment it is ready, which
        # the routes may say a pass later.
        self.prefix.apply(message.shard_id, message.block_size, message.added, message.removed, message.cleared)

    def prompt_tokens(self, entry: ModelEntry) -> PromptTokens | None:
        """The model's tokenizer and chat template, read once; None without one (said once in the log, and
        looked for again every TOKENIZER_RETRY_S: a control plane fetches a Hugging Face model's soon after
        the model is added, control/tokenizers.py)."""
        folder = entry.tokenizer
        if not folder:
            return None
        tokens, failed_at = self._tokenizers.get(folder, (None, None))
        if tokens is None and (failed_at is None or time.monotonic() - failed_at > TOKENIZER_RETRY_S):
            try:
                tokens = PromptTokens(folder)
                self._tokenizers[folder] = (tokens, None)
            except NoTokenizer as e:
                if failed_at is None:
                    log.warning("%s: not routed by what its replicas have cached yet: %s", entry.name, e)
                self._tokenizers[folder] = (None, time.monotonic())
        return tokens

    def changed(self) -> asyncio.Event:
        """Set the next time the models or their endpoints change: what a request waiting for a load wakes on."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def set_notes(self, waits: dict[str, str], loading: dict[str, str]) -> None:
        self.waits, self.loading = waits, loading

    def set_placed(self, placed: dict[str, Placed]) -> None:
        """The catalog's models and their ready replicas, from the reconciler; kept across settings changes.
        A model named in the settings too keeps the settings' own entry (its static endpoints win)."""
        if placed == self._placed:
            return
        self._placed = dict(placed)
        if self._settings is not None:
            self.apply(self._settings)

    def apply(self, settings: ClusterSettings) -> None:
        """Rebuild from the cluster's settings, keeping the state of endpoints that stay."""
        self._settings = settings
        breaker = settings.router.breaker
        models: dict[str, ModelEntry] = {}
        seen: dict[str, Endpoint] = {}
        named = {m.name for m in settings.models}
        sources: list[tuple[ModelSettings, list[Endpoint], Placed | None]]
        sources = [(m, self._endpoints_of(m), None) for m in settings.models]
        sources += [(p.settings, self._replicas_of(p), p) for name, p in self._placed.items() if name not in named]
        for model, endpoints, placed in sources:
            entry = ModelEntry(model)
            if placed is not None:
                entry.catalog = placed.upstream or model.name
                entry.on_demand, entry.stopped = placed.on_demand, placed.stopped
                entry.tokenizer = placed.tokenizer
            for made in endpoints:
                kept = self._endpoints.get(made.id)
                if kept is not None and (kept.url, kept.upstream_model) == (made.url, made.upstream_model):
                    kept.weight, kept.key_file = made.weight, made.key_file
                    if made.key_file is None:
                        kept.api_key = made.api_key
                    made = kept
                else:
                    made.breaker.on_open = lambda reason, ident=made.id: self._tripped(ident, reason)
                made.breaker.configure(breaker.failures, float(breaker.open_for), breaker.distinct_keys)
                entry.endpoints.append(made)
                seen[made.id] = made
            models[model.name] = entry
        self.models, self._endpoints = models, seen
        placed_shards = {e.replica for e in seen.values() if e.replica}
        for shard in self._placed_shards - placed_shards:
            self.prefix.forget(shard)  # stopped, lost or draining: its blocks route nothing now
        self._placed_shards = placed_shards
        self._key_files = {p: f for p, f in self._key_files.items() if p in self._wanted_files()}
        self.refresh_keys()
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _endpoints_of(self, model: ModelSettings) -> list[Endpoint]:
        if model.source == "external" and model.external is not None:
            ext = model.external
            upstream = ext.model or model.name
            url = ext.url.rstrip("/")
            files: list[tuple[str | None, float]] = [(k.file, k.weight or 1.0) for k in ext.api_key_files]
            if not files:
                files = [(ext.api_key_file or None, 1.0)]
            made = []
            for n, (path, weight) in enumerate(files, start=1):
                ident = f"external:{model.name}" if len(files) == 1 else f"external:{model.name}#{n}"
                made.append(Endpoint(id=ident, model=model.name, url=url, upstream_model=upstream,
                                     external=True, provider="external", weight=weight, key_file=path))
            return made
        return [Endpoint(id=url.rstrip("/"), model=model.name, url=url.rstrip("/"), upstream_model=model.name)
                for url in model.endpoints]

    @staticmethod
    def _replicas_of(placed: Placed) -> list[Endpoint]:
        name = placed.settings.name
        engines = dict(placed.engines)
        return [Endpoint(id=f"{name}/{shard}", model=name, url=url.rstrip("/"), upstream_model=placed.upstream or name,
                         provider=engines.get(shard) or "openai_compatible", api_key=placed.api_key, replica=shard)
                for shard, url in placed.replicas]

    def _wanted_files(self) -> set[str]:
        return {e.key_file for e in self._endpoints.values() if e.key_file}

    def refresh_keys(self) -> None:
        """Re-read provider key files that changed; called every few seconds."""
        for path in self._wanted_files():
            state = self._key_files.setdefault(path, _KeyFile(path))
            try:
                info = os.stat(path)
                stamp = (info.st_mtime, info.st_size)
                if stamp != state.stamp:
                    # Checked at every read, not only when set: the settings may come from the store,
                    # written on another control plane, and a file can change after it was set.
                    state.value, state.stamp = read_key_file(path, self.own_secrets), stamp
                    if state.failed:
                        log.info("the provider key in %s can be read again", path)
                    state.failed = False
            except KeyFileRefused as e:
                if not state.failed:
                    log.error("the provider key file is refused: %s; its endpoint is left out until it is fixed", e)
                state.failed, state.value, state.stamp = True, None, None
            except OSError as e:
                if not state.failed:
                    log.error("the provider key in %s cannot be read (%s); its endpoint is left out until it can",
                              path, getattr(e, "strerror", None) or e)
                state.failed, state.value, state.stamp = True, None, None
        for endpoint in self._endpoints.values():
            if endpoint.key_file:
                endpoint.api_key = self._key_files[endpoint.key_file].value

    def _tripped(self, ident: str, reason: str) -> None:
        if self.on_trip is not None:
            self.on_trip(ident, reason)

    def trip(self, ident: str, reason: str) -> None:
        """Open an endpoint's breaker because another process's opened (worker processes)."""
        endpoint = self._endpoints.get(ident)
        if endpoint is not None:
            endpoint.breaker.trip(reason, quiet=True)

    def model(self, name: str) -> ModelEntry | None:
        return self.models.get(name)

    def endpoints(self) -> list[Endpoint]:
        return list(self._endpoints.values())
