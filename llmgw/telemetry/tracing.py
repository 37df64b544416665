"""A process's traces: an OpenTelemetry TracerProvider of its own, sending to the `telemetry.otlp_endpoint`.

Each program owns one `Tracing` (the control plane, each of its worker
processes, the agent) and hands it to what makes spans; nothing here sets
OpenTelemetry's global provider or propagator, so two in one process (the
tests') do not meet. While no endpoint is set there is no provider at all:
`tracer` is None, and the hot path's one check of it is the whole cost.

Spans are ended by hand, never in `with`: OpenTelemetry's `with` records an
exception's message as an event, and an exception can carry a prompt's
words (a guard's refusal quotes what it refused). What a span holds is set
attribute by attribute, by the code that makes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmgw.config import TelemetrySettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["Span", "SpanKind", "Tracing", "child_context", "end", "parent_from", "traceparent_of"]

log = logging.getLogger("llmgw.telemetry")

# W3C Trace Context only (traceparent, tracestate): what engines, outside providers and collectors read.
_W3C = TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"
SCOPE = "llmgw"
# Seconds a provider being replaced or shut down is given to send what it holds.
FLUSH_SECONDS = 5.0


class Tracing:
    """The spans of one process: made while `telemetry.otlp_endpoint` is set, none while it is not.

    `apply` is called with each new settings; a changed endpoint or ratio
    replaces the provider, the old one sending what it still holds from a
    thread of its own so the event loop never waits on a collector.
    """

    def __init__(self, service: str, instance: str = "", version: str = "") -> None:
        self.service, self.instance, self.version = service, instance, version
        self.settings = TelemetrySettings()
        self.tracer: Tracer | None = None
        self._provider: TracerProvider | None = None

    @property
    def on(self) -> bool:
        return self.tracer is not None

    @property
    def roots(self) -> bool:
        """Whether a trace can begin here: on, at a ratio above 0. At 0 only a caller's sampled trace is kept."""
        return self.tracer is not None and self.settings.sample_ratio > 0

    def apply(self, settings: TelemetrySettings) -> None:
        if settings == self.settings:
            return
        old = self._provider
        self.settings = settings
        self._provider, self.tracer = None, None
        if settings.otlp_endpoint:
            self._provider = self._make(settings)
            self.tracer = self._provider.get_tracer(SCOPE, self.version)
            log.info("tracing to %s, %g of traces kept", settings.traces_url, settings.sample_ratio)
        if old is not None:
            threading.Thread(target=_shutdown, args=(old,), name="traces-flush", daemon=True).start()

    def _make(self, settings: TelemetrySettings) -> TracerProvider:
        # Imported here: the SDK and the exporter (requests, protobuf) are a tenth of a second of
        # start-up that a program tracing nothing, and every `llmgw ctl`, would pay for nothing.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        attributes = {"service.name": self.service, "service.version": self.version}
        if self.instance:
            attributes["service.instance.id"] = self.instance
        # ParentBased: a caller's decision (a client's traceparent, the leader's StartShard) stands;
        # the ratio decides only for a trace that begins here.
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
                                  resource=Resource.create(attributes), shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.traces_url)))
        return provider

    def start(self, name: str, parent: Context | Span | None = None, *, kind: SpanKind = SpanKind.INTERNAL,
              attributes: Mapping[str, Any] | None = None) -> Span | None:
        """A span begun now under `parent` (a span, or a context from `parent_from`), or None while off.

        With no parent it is a root, sampled by the ratio: one sampled out is a span that records nothing,
        whose traceparent still tells whoever it is passed to that it was not kept. The caller ends it (`end`)."""
        tracer = self.tracer
        if tracer is None:
            return None
        context = trace.set_span_in_context(parent) if isinstance(parent, Span) else parent
        return tracer.start_span(name, context=context or Context(), kind=kind, attributes=attributes,
                                 record_exception=False, set_status_on_exception=False)

    def shutdown(self) -> None:
        """Send what is held and stop: called as the program stops (blocking; run it in a thread)."""
        provider, self._provider, self.tracer = self._provider, None, None
        if provider is not None:
            _shutdown(provider)


def _shutdown(provider: TracerProvider) -> None:
    try:
        provider.force_flush(int(FLUSH_SECONDS * 1000))
        provider.shutdown()
    except Exception as e:  # noqa: BLE001 - a collector that went away must not fail a stop
        log.warning("traces not all sent at shutdown: %s", e)


def parent_from(headers: Mapping[str, str]) -> Context | None:
    """The trace a caller's W3C `traceparent` (in headers or a message) puts this work in, or None without one.

    A malformed or all-zero traceparent is no trace: it is neither followed nor passed on."""
    if not headers.get(TRACEPARENT):
        return None
    context = _W3C.extract(headers)
    span = trace.get_current_span(context)
    return context if span.get_span_context().is_valid else None


def child_context(span: Span | None, fallback: Context | None = None) -> Context | None:
    return trace.set_span_in_context(span) if span is not None else fallback


def traceparent_of(parent: Span | Context | None) -> dict[str, str]:
    """`traceparent` (and `tracestate`) naming `parent`, for a request or message that carries the trace on."""
    if parent is None:
        return {}
    context = trace.set_span_in_context(parent) if isinstance(parent, Span) else parent
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier


def end(span: Span | None, error: str | None = None) -> None:
    """End `span`; `error` is a code of llmgw's own (never a message, which could quote the request)."""
    if span is None:
        return
    if error:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
