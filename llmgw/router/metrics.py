"""The client API's Prometheus metrics, in the control plane's own registry.

Per-request work here is a few label lookups and increments; the figures
that describe state (queues, breakers, the usage writer) are read when
Prometheus scrapes, not kept up to date on the hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase

if TYPE_CHECKING:
    from llmgw.router.service import Router

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1)
_BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

M = TypeVar("M", bound=MetricWrapperBase)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("llmgw_requests", "Client API requests by model, API and status",
                                ["model", "api", "status"], registry=registry)
        self.tokens = Counter("llmgw_tokens", "Tokens by model and direction (prompt counts cached ones too)",
                              ["model", "direction"], registry=registry)
        self.ttft = Histogram("llmgw_time_to_first_token_seconds", "From the request to the engine's first byte",
                              ["model"], buckets=_TTFT_BUCKETS, registry=registry)
        self.per_token = Histogram("llmgw_time_per_output_token_seconds",
                                   "Seconds per answer token after the first", ["model"],
                                   buckets=_PER_TOKEN_BUCKETS, registry=registry)
        self.refused = Counter("llmgw_refusals", "Requests refused before reaching an engine, by reason",
                               ["model", "code"], registry=registry)
        self.retries = Counter("llmgw_retries", "Attempts retried on another endpoint", ["model"],
                               registry=registry)

        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: M, *labels: str) -> M:
        """A metric's child for these labels, looked up once: labels() costs microseconds a call."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return cast(M, found)  # kept under the metric's id: that metric's child, of its class

    def watch(self, router: Router, registry: CollectorRegistry) -> None:
        registry.register(_StateCollector(router))


class _StateCollector:
    """Queues, breakers and the usage writer, read at scrape time."""

    def __init__(self, router: Router):
        self.router = router

    def collect(self) -> list[Metric]:
        waiting = GaugeMetricFamily("llmgw_admission_waiting", "Requests waiting for room, by model and band",
                                    labels=["model", "band"])
        breakers = GaugeMetricFamily("llmgw_breaker_state", "Each endpoint's breaker: 0 closed, 1 half-open, 2 open",
                                     labels=["model", "endpoint"])
        endpoint_flight = GaugeMetricFamily("llmgw_endpoint_in_flight", "Requests in flight per endpoint",
                                            labels=["model", "endpoint"])
        for name in self.router.registry.models:
            for band, count in self.router.admission.waiting(name).items():
                waiting.add_metric([name, band], count)
        for endpoint in self.router.registry.endpoints():
            state = endpoint.breaker.state
            breakers.add_metric([endpoint.model, endpoint.id], _BREAKER_STATES.get(str(state), 0))
            endpoint_flight.add_metric([endpoint.model, endpoint.id], endpoint.in_flight)
        usage = self.router.usage
        lag = GaugeMetricFamily("llmgw_usage_writer_lag_seconds", "Age of the oldest usage row not yet in the store")
        lag.add_metric([], usage.lag())
        pending = GaugeMetricFamily("llmgw_usage_writer_pending", "Usage rows waiting to be written")
        pending.add_metric([], usage.pending())
        dropped = GaugeMetricFamily("llmgw_usage_writer_dropped",
                                    "Usage rows dropped since start (the store was away too long)")
        dropped.add_metric([], usage.dropped)
        bound = GaugeMetricFamily("llmgw_usage_writer_max_pending",
                                  "The most usage rows kept while the store is away; past it the oldest are dropped")
        bound.add_metric([], usage.max_pending)
        guard = GaugeMetricFamily("llmgw_guard_decisions", "Guardrail decisions since start, by rule and action",
                                  labels=["rule", "action"])
        for (rule, action), count in self.router.guard_stats.decisions.items():
            guard.add_metric([rule, action], count)
        budgets = GaugeMetricFamily("llmgw_budget_spent_ratio",
                                    "This period's spend against each budget a request met (1 is all of it), by level",
                                    labels=["scope", "id", "period"])
        for scope, scope_id, period, ratio in self.router.budgets.spent_ratios():
            budgets.add_metric([scope, scope_id, period], ratio)
        cache = self.router.cache
        families: list[Metric] = [waiting, breakers, endpoint_flight, lag, pending, dropped, bound, guard, budgets]
        for name, value, what in (("hits", cache.hits, "Answers reused for the same request"),
                                  ("similar_hits", cache.similar_hits, "Answers reused for a similar question"),
                                  ("misses", cache.misses, "Cache look-ups that found nothing"),
                                  ("bypasses", cache.bypasses, "Requests a policy kept out of the cache"),
                                  ("bytes", cache.bytes, "Bytes the answer cache holds"),
                                  ("entries", cache.entries, "Answers the cache holds"),
                                  ("projects", len(self.router.project_caches),
                                   "Projects with answer cache settings, as this control plane last read them")):
            family = GaugeMetricFamily(f"llmgw_cache_{name}", what)
            family.add_metric([], value)
            families.append(family)
        return families
