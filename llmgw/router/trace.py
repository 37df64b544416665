"""A client request's spans, in the OpenTelemetry GenAI conventions: what a trace viewer shows of a model call.

One span for the request (`chat MODEL`, `text_completion MODEL`,
`embeddings MODEL`), one `upstream` span per attempt at an engine or a
provider, and the guardrails' and the answer cache's steps beneath the
request. A client's W3C `traceparent` puts the request in the client's
trace, and the attempt's is sent on to the engine, so an engine that traces
(vLLM, a provider) continues the same trace.

What is asked and what is answered is never in a span: every attribute is
set here, by name, from counts, names and codes the router made itself; no
message, no exception, no rule's own words (an outside service's reason is
its text). The session is the conversation id only where the client named
it (a header, `user`): the one the router makes from the conversation's
first words is a digest of them, which a short prompt could be found from.

While tracing is off (no endpoint, or a ratio of 0 and no sampled
traceparent) no span is made: the request pays a header lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from llmgw.router.apis import by_api
from llmgw.telemetry import TRACEPARENT, SpanKind, Tracing, parent_from, traceparent_of

# Re-exported: the router's steps end their spans as trace.end, and name them trace.Span.
from llmgw.telemetry import Span as Span
from llmgw.telemetry import end as end

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from llmgw.guard import Decision
    from llmgw.router.call import Call
    from llmgw.router.endpoint import Endpoint

# Where the client's sampling parameters are, by the name the conventions give them.
_REQUEST_NUMBERS = (("gen_ai.request.max_tokens", ("max_tokens", "max_completion_tokens", "max_output_tokens")),
                    ("gen_ai.request.temperature", ("temperature",)),
                    ("gen_ai.request.top_p", ("top_p",)))


def begin(tracing: Tracing, request: web.Request | None, api: str,
          request_id: str) -> tuple[Span | None, Context | None]:
    """The request's span (None while tracing is off), and the client's trace to pass on while it is off.

    Tracing off, a client's traceparent is still sent on to the engine, as it
    came (once found well formed), so the engine's own traces join the client's.
    """
    # A batch's line (request None) has no client trace to join: it is a root, sampled by the ratio.
    parent = parent_from(request.headers) if request is not None and TRACEPARENT in request.headers else None
    if not tracing.on or (parent is None and not tracing.roots):
        # At ratio 0 a request the client did not trace makes no span at all, rather than one that records
        # nothing: the hot path pays as it does with tracing off.
        return None, parent
    operation = by_api(api).operation
    span = tracing.start(operation, parent, kind=SpanKind.SERVER,
                         attributes={"gen_ai.operation.name": operation, "llmgw.api": api,
                                     "llmgw.request.id": request_id})
    return span, None if span is not None else parent


def describe(span: Span, call: Call) -> None:
    """What the request asked for, once it is read: the model and the client's own sampling parameters."""
    if not span.is_recording():
        return
    model = call.model.name
    span.update_name(f"{by_api(call.api).operation} {model}")
    span.set_attribute("gen_ai.request.model", model)
    body = call.client_body
    for attribute, fields in _REQUEST_NUMBERS:
        for field in fields:
            value = body.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                span.set_attribute(attribute, value)
                break
    if call.session_key and not call.session_key.startswith("prompt:"):
        span.set_attribute("gen_ai.conversation.id", call.session_key)
    if call.stream:
        span.set_attribute("llmgw.stream", True)
    span.set_attribute("llmgw.profile", call.profile)


def finish(span: Span | None, call: Call | None, status: int, error: str | None) -> None:
    """The outcome: the answering model, the tokens, the status and llmgw's code for a refusal; the span ended.

    `call` is None for a request refused before it was read whole (bad JSON, no such model, the guard)."""
    if span is None:
        return
    if call is not None and span.is_recording():
        if call.status == 200 or call.prompt_tokens or call.completion_tokens:
            span.set_attribute("gen_ai.response.model", call.served_model or call.model.name)
        if call.answer_id:
            span.set_attribute("gen_ai.response.id", call.answer_id)
        span.set_attribute("gen_ai.usage.input_tokens", call.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", call.completion_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", call.cached_tokens)
        if call.cache:
            span.set_attribute("llmgw.cache", call.cache)
        if call.retries:
            span.set_attribute("llmgw.retries", len(call.retries))
        if call.decided_by:
            span.set_attribute("llmgw.decided_by", call.decided_by.split(":", 2)[0])
    span.set_attribute("http.response.status_code", status)
    if error:
        span.set_attribute("error.type", error)
    # A refusal of the client's request (4xx) is the gateway working; a failure (5xx, a cut) is an error.
    end(span, error if status >= 500 or status == 499 else None)


def step(tracing: Tracing, call: Call, name: str) -> Span | None:
    """A child of the request's span for one of its steps (guard input, guard review, cache lookup…)."""
    if call.span is None:
        return None
    return tracing.start(name, call.span)


def guarded(span: Span | None, decisions: Sequence[Decision], refused_code: str | None = None) -> None:
    """A guard step's outcome, by counts and actions only: a decision's rule can hold an outside service's words."""
    if span is None:
        return
    if span.is_recording():
        actions = {d.action for d in decisions}
        outcome = ("blocked" if refused_code else "redacted" if "redact" in actions
                   else "flagged" if actions else "passed")
        span.set_attribute("llmgw.guard.outcome", outcome)
        span.set_attribute("llmgw.guard.decisions", len(decisions))
    end(span, refused_code)


def attempt(tracing: Tracing, call: Call, endpoint: Endpoint) -> tuple[Span | None, dict[str, str]]:
    """An `upstream` span for one attempt at `endpoint`, and the traceparent headers that attempt sends."""
    if call.span is None:
        return None, traceparent_of(call.trace_parent)
    span = tracing.start("upstream", call.span, kind=SpanKind.CLIENT)
    if span is None:
        return None, {}
    if span.is_recording():
        parts = urlsplit(endpoint.url)
        span.set_attribute("gen_ai.provider.name", endpoint.provider)
        span.set_attribute("gen_ai.operation.name", by_api(call.api).operation)
        span.set_attribute("gen_ai.request.model", endpoint.upstream_model)
        span.set_attribute("llmgw.endpoint", endpoint.id)
        if parts.hostname:
            span.set_attribute("server.address", parts.hostname)
        if parts.port:
            span.set_attribute("server.port", parts.port)
    return span, traceparent_of(span)


def attempt_failed(span: Span | None, status: int | None, reason: str) -> None:
    """`reason` is the router's own phrase for the failure ("answered 503", "timeout waiting for the engine")."""
    if span is None:
        return
    if status:
        span.set_attribute("http.response.status_code", status)
    end(span, reason)


def attempt_answered(span: Span | None, status: int, took: float) -> None:
    if span is not None:
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("llmgw.first_byte_ms", round(took * 1000, 3))
