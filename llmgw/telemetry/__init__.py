"""Traces: OpenTelemetry over OTLP/HTTP, one provider per program, owned and handed in (tracing.py)."""

from llmgw.telemetry.tracing import (
    TRACEPARENT,
    Span,
    SpanKind,
    Tracing,
    child_context,
    end,
    parent_from,
    traceparent_of,
)

__all__ = ["TRACEPARENT", "Span", "SpanKind", "Tracing", "child_context", "end", "parent_from", "traceparent_of"]
