"""The router's long-lived parts, one set per control plane process.

The registry, the HTTP client pool to engines, admission, the engine
scraper and the accounting (rate limits, budgets, the usage writer) live
here, started after the store is open and stopped — usage flushed — before
it closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import aiohttp
from prometheus_client import CollectorRegistry

from llmgw.account import places_of
from llmgw.accounting import Budgets, RateLimiter, UsageWriter, batch_cost, cost
from llmgw.config import ClusterSettings, OwnSecrets
from llmgw.events import Event, Events
from llmgw.guard import Decision, GuardStats, Resolver, Reviewers
from llmgw.router.admission import Admission
from llmgw.router.augmenting import Augmenting
from llmgw.router.cache import AnswerCache
from llmgw.router.call import Call
from llmgw.router.demand import DemandRecord
from llmgw.router.embedder import CatalogEmbedder
from llmgw.router.metrics import RouterMetrics
from llmgw.router.registry import ModelEntry, Registry
from llmgw.router.scrape import EngineScraper
from llmgw.router.similar import Embedder, SimilarIndex
from llmgw.router.targets import providers_session
from llmgw.store import KeysStore, ProjectCache, StoreError, Usage, UsageStore
from llmgw.telemetry import Tracing

if TYPE_CHECKING:
    from llmgw.account import Principal
    from llmgw.router.endpoint import Endpoint

log = logging.getLogger("llmgw.router")

KEY_FILE_CHECK = 2.0  # seconds between looks at the provider key files


class _Store(KeysStore, UsageStore, Protocol):
    """What Router calls: the projects' answer cache settings, and (through Budgets and UsageWriter)
    the budgets and usage."""


class Router:
    def __init__(self, store: _Store, settings: Callable[[], ClusterSettings], registry: CollectorRegistry,
                 *, own_secrets: OwnSecrets, share: bool = False, tracing: Tracing | None = None,
                 events: Events | None = None):
        # share: this router is one of several worker processes, which
        # exchange their limits' and budgets' counts (llmgw/control/workers/).
        # own_secrets: this machine's secret files, which no provider key file may be.
        self.store = store
        self.settings = settings
        # The process's traces, owned by whoever made this router (a plane, a worker); none made here
        # is ever applied, so a router made without one traces nothing.
        self.tracing = tracing or Tracing("llmgw-server")
        current = settings()
        self.registry = Registry(own_secrets)
        self.demand = DemandRecord()  # read by the leader's reconciler, in this process
        self.admission = Admission(current.router.admission)
        # Its own counts are always kept apart for an exchange: worker processes share them every
        # 100 ms, active-active control planes every 2 s (control/exchange.py).
        self.limits = RateLimiter(share=True)
        # For the people who run the gateway: a judge or a service that could not answer, a budget
        # running out, a guardrail's block. Logged here; the process that made it (the control plane,
        # a worker) has the notification webhooks subscribe too.
        self.events = events if events is not None else Events()
        self.events.subscribe(_log_event)
        self.budgets = Budgets(store, share=share, events=self.events)
        self.usage = UsageWriter(store)
        self.cache = AnswerCache(int(current.router.cache.max_bytes), int(current.router.cache.max_entry_bytes))
        # The questions answered, per conversation, for projects with --similar;
        # their vectors are counted in the cache's bytes and leave with their answers.
        self.similar = SimilarIndex(self.cache)
        # Knowledge bases' part in a request (router.knowledge), set when the client app starts.
        self.augmenting: Augmenting | None = None
        self._embedding_model = current.router.cache.embedding_model
        # router.cache.embedding_budget: how long a question waits for its vector (reuse.py asks it).
        self.embedding_budget = float(current.router.cache.embedding_budget)
        self._embedder_refusals: set[str] = set()  # said once in the log, not once a request
        self.project_caches: dict[str, ProjectCache] = {}  # `llmgw keys cache`, read every few seconds
        self._caches_task: asyncio.Task[None] | None = None
        self.guards = Resolver()  # which guardrail policies apply, per key, per settings version
        self.guard_stats = GuardStats()
        self.reviewers: Reviewers | None = None  # the judge and outside services; made with the HTTP session
        self.metrics = RouterMetrics(registry)
        self.metrics.watch(self, registry)
        # Made in start(), in the running event loop aiohttp wants them made in; read through `session`
        # and session_for(), which only requests reach, and requests come after start().
        self._session: aiohttp.ClientSession | None = None
        self._providers: aiohttp.ClientSession | None = None  # outside providers' (router/targets.py)
        self.scraper: EngineScraper | None = None
        self._keys_task: asyncio.Task[None] | None = None
        self.apply(current)

    def apply(self, settings: ClusterSettings) -> None:
        """The cluster's settings changed: rebuild what depends on them, keeping live state."""
        self.registry.apply(settings)
        self.admission.configure(settings.router.admission)
        self.cache.configure(int(settings.router.cache.max_bytes), int(settings.router.cache.max_entry_bytes))
        self.embedding_budget = float(settings.router.cache.embedding_budget)
        if settings.router.cache.embedding_model != self._embedding_model:
            # Another model's vectors are not comparable with the new one's, even
            # where their dimensions happen to match.
            self._embedding_model = settings.router.cache.embedding_model
            self.similar.clear()
            self._embedder_refusals.clear()

    def embedder(self, principal: Principal) -> Embedder | None:
        """What embeds this key's questions: router.cache.embedding_model at its local endpoints, or None.

        None (the question then only gets an exact match) when no embedding
        model is set, the catalog has none by that name, this key may not use
        it — the gateway asks as the question's project would — or it has no
        endpoint here that is not an outside provider's.
        """
        name = self._embedding_model
        if not name or self._session is None:
            return None
        model = self.registry.model(name)
        if model is None:
            self._cannot_embed(f"router.cache.embedding_model names {name}, which is not in the catalog; "
                               "similar questions are not looked up until it is")
            return None
        if not principal.limits.allows_model(name):
            return None  # the key's own limits: nothing to tell an administrator
        if not CatalogEmbedder.local(model):
            self._cannot_embed(f"router.cache.embedding_model {name} has no local endpoint that can take "
                               "requests (a question is never sent to an outside provider for the cache); "
                               "similar questions are not looked up until it has")
            return None
        return CatalogEmbedder(self._session, model, budget=self.embedding_budget)

    def _cannot_embed(self, why: str) -> None:
        if why not in self._embedder_refusals:
            self._embedder_refusals.add(why)
            log.warning("%s", why)

    async def start(self) -> None:
        # No limit on connections: admission decides how many go to an
        # engine; a pool limit would queue requests invisibly beneath it.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300)
        session = self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                        skip_auto_headers=("User-Agent",))
        self._providers = providers_session()
        await self.budgets.restore()
        self.budgets.start()
        self.usage.start()
        self.reviewers = Reviewers(session, self.judge_endpoints, events=self.events)
        self.scraper = EngineScraper(session, self.registry.endpoints)
        self.scraper.start()
        self._keys_task = asyncio.create_task(self._watch_keys(), name="provider-keys")
        await self.load_caches()
        self._caches_task = asyncio.create_task(self._watch_caches(), name="project-caches")

    async def stop(self) -> None:
        if self._keys_task:
            self._keys_task.cancel()
        if self._caches_task:
            self._caches_task.cancel()
        if self.scraper:
            await self.scraper.stop()
        written = await self.usage.stop()
        if written:
            log.info("wrote the last %d usage rows", written)
        await self.budgets.stop()
        if self._session:
            await self._session.close()
        if self._providers:
            await self._providers.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The engines' connections (and a standby's to its leader); made in start()."""
        return _started(self._session)

    def session_for(self, entry: ModelEntry) -> aiohttp.ClientSession:
        """The session a model's requests are sent through: an outside provider's is checked at
        every connection for the addresses it may not reach, unless it allows private targets."""
        ext = entry.settings.external
        if entry.settings.source == "external" and not (ext is not None and ext.allow_private_targets):
            return _started(self._providers)
        return self.session

    def judge_endpoints(self, model: str) -> list[Endpoint]:
        """The judge model's usable replicas, as the judge asks them (and the admin API's speed check)."""
        entry = self.registry.model(model)
        return entry.usable() if entry is not None else []

    async def load_caches(self) -> None:
        """The projects' answer cache settings; a change is in force here within router.cache.read_every."""
        try:
            self.project_caches = {c.project_id: c for c in await self.store.list_project_caches()}
        except StoreError as e:
            log.debug("answer cache settings not read: %s", e)

    async def _watch_caches(self) -> None:
        while True:
            await asyncio.sleep(float(self.settings().router.cache.read_every))
            await self.load_caches()
            self.cache.sweep(time.time())

    async def _watch_keys(self) -> None:
        while True:
            await asyncio.sleep(KEY_FILE_CHECK)
            await asyncio.to_thread(self.registry.refresh_keys)

    def refused_early(self, request_id: str, principal: Principal, api: str, status: int, code: str, *,
                      batch_id: str | None = None, keep: Callable[[Usage], None] | None = None) -> None:
        self.metrics.child(self.metrics.refused, "-", code).inc()
        self.metrics.child(self.metrics.requests, "-", api, str(status)).inc()
        detail = {"api": api, "error": code, **({"batch": batch_id} if batch_id else {})}
        row = Usage(id=request_id, at=time.time(), key_id=principal.key.id, project_id=principal.path.project.id,
                    person_id=principal.key.person_id, model="", status=status, detail=detail, batch_id=batch_id)
        (keep or self.usage.submit)(row)

    def key_refused(self, principal: Principal, refusal: str, now: float) -> None:
        """A key refused at the door: one that has expired is told to the webhooks, once for the key."""
        key = principal.key
        if key.expires_at is not None and key.expires_at <= now and key.revoked_at is None:
            self.events.emit("key_expired", subject=key.id, once=f"key_expired:{key.id}", key_id=key.id,
                             key_name=key.name, project=str(principal.path), expired_at=key.expires_at,
                             **places_of(principal.path))

    def guard_blocked(self, principal: Principal, policies: Sequence[str], decisions: Iterable[Decision]) -> None:
        """A request or an answer stopped by a guardrail: the policies and rules, never the text.
        Once an hour per project; the events held back are counted in the next one's `held_back`."""
        blocks = [d for d in decisions if d.action == "block"]
        if not blocks:
            return
        project = principal.path.project.id
        self.events.emit("guardrail_blocked", subject=project, project=str(principal.path), project_id=project,
                         key_id=principal.key.id, policies=list(policies), rules=sorted({d.rule for d in blocks}),
                         direction=blocks[0].direction, blocks=len(blocks), **places_of(principal.path))

    def settle(self, call: Call) -> None:
        """The call is over: count its tokens and money and queue its usage row. Never awaits."""
        model = call.model
        served = self.registry.model(call.served_model or model.name) or model
        spent = cost(served.settings.price, call.prompt_tokens, call.cached_tokens, call.completion_tokens,
                     images=call.images)
        if call.batch_id:
            spent = batch_cost(served.settings.price, spent)
        principal = call.principal
        now = time.time()
        tokens = call.prompt_tokens + call.completion_tokens
        if tokens:
            self.limits.add_tokens(principal, tokens)  # on the limiter's own clock
        if spent:
            self.budgets.charge(principal, spent, now)
        name = served.name
        if served.catalog:
            self.demand.used(served.catalog)  # an answer that ran for minutes was not idleness
        m = self.metrics
        m.child(m.requests, name, call.api, str(call.status)).inc()
        if call.prompt_tokens:
            m.child(m.tokens, name, "prompt").inc(call.prompt_tokens)
        if call.cached_tokens:
            m.child(m.tokens, name, "cached").inc(call.cached_tokens)
        if call.completion_tokens:
            m.child(m.tokens, name, "completion").inc(call.completion_tokens)
        if call.ttft is not None:
            m.child(m.ttft, name).observe(call.ttft)
            if call.completion_tokens > 1 and call.first_token_at is not None:
                after = time.perf_counter() - call.first_token_at
                m.child(m.per_token, name).observe(after / (call.completion_tokens - 1))
        if call.retries:
            m.child(m.retries, name).inc(len(call.retries))
        if call.guard is not None:
            decisions = list(call.guard_decisions) + (call.checker.decisions if call.checker else [])
            if decisions:
                self.guard_stats.record(decisions)
                self.guard_blocked(principal, call.guard.names, decisions)
        row = Usage(
            id=call.id, at=call.at, key_id=principal.key.id, project_id=principal.path.project.id,
            person_id=principal.key.person_id, model=name,
            endpoint=call.endpoint.id if call.endpoint else "", status=call.status,
            prompt_tokens=call.prompt_tokens, cached_tokens=call.cached_tokens,
            completion_tokens=call.completion_tokens, cost_micros=spent,
            ttft_ms=None if call.ttft is None else round(call.ttft * 1000, 3),
            duration_ms=round(call.elapsed() * 1000, 3), cache=call.cache, detail=call.detail(),
            answer_id=call.answer_id, batch_id=call.batch_id)
        # A batch's line keeps its row to record with the line's result (llmgw.router.batches).
        (call.keep_usage or self.usage.submit)(row)


def _started(session: aiohttp.ClientSession | None) -> aiohttp.ClientSession:
    if session is None:
        raise RuntimeError("the router's HTTP sessions are made in Router.start(), and it has not run")
    return session


def _log_event(event: Event) -> None:
    held = f" ({event.held_back} more like it held back this hour)" if event.held_back else ""
    log.warning("event %s about %s: %s%s", event.kind, event.subject or "-",
                ", ".join(f"{k}={v}" for k, v in event.fields.items()), held)
