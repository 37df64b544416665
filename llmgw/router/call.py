"""One client request's journey through the router, and the refusals it can meet.

A `Call` carries what the handler learned (who asks, for which model, in
which API shape) and what happened (which endpoint, retries, tokens, the
status), so the usage row and `llmgw ctl request ID` can say it all from
one place. Nothing in it is the request's text.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmgw.account import Principal
from llmgw.guard import Decision
from llmgw.router.endpoint import Endpoint
from llmgw.router.registry import ModelEntry

if TYPE_CHECKING:
    from array import array

    from aiohttp import web
    from opentelemetry.context import Context

    from llmgw.guard import EffectivePolicy, OutputChecker, Redactor
    from llmgw.router.similar import Question
    from llmgw.store import Usage
    from llmgw.telemetry import Span


class Refuse(Exception):
    """A refusal the client sees: status, a sentence, a code, and headers such as Retry-After."""

    def __init__(self, status: int, message: str, code: str, *, param: str | None = None,
                 headers: dict[str, str] | None = None, decided_by: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.param, self.headers = param, headers or {}
        self.decided_by = decided_by or code


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


@dataclass
class Call:
    id: str
    api: str  # chat | completions | embeddings | messages | responses
    principal: Principal
    model: ModelEntry
    upstream_path: str  # /chat/completions, /completions, /embeddings
    upstream_body: dict[str, Any]
    stream: bool
    wants_usage: bool  # the client asked for the usage chunk (stream_options.include_usage)
    profile: str
    session_key: str | None
    band: str | None
    started: float = field(default_factory=time.perf_counter)
    at: float = field(default_factory=time.time)
    endpoint: Endpoint | None = None
    status: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # Counts the router made itself, the engine's usage not having said them
    # ("prompt_tokens", "completion_tokens"): router.tally.
    estimated: tuple[str, ...] = ()
    delivered_tokens: int | None = None  # of completion_tokens, those that reached the client
    images: int = 0  # pictures made, each charged at the model's price.per_image
    # A workflow job's run (handlers.Inside): its progress's listener, and the replica its runner chose for it.
    on_progress: Callable[[Any], Any] | None = None
    pinned: str | None = None  # an endpoint's id
    ttft: float | None = None
    first_token_at: float | None = None
    retries: list[dict[str, Any]] = field(default_factory=list)
    decided_by: str | None = None  # the limit, breaker or timeout that decided the outcome
    error: str | None = None
    served_model: str | None = None  # a fallback's name when one answered
    client_body: dict[str, Any] = field(default_factory=dict)  # as the client sent it; never stored
    guard: EffectivePolicy | None = None  # the request's EffectivePolicy, when guardrails apply
    redactor: Redactor | None = None  # its placeholders and their values: memory only, for this request's life
    checker: OutputChecker | None = None  # the answer's OutputChecker, when the policy reads the answer
    guard_decisions: list[Decision] = field(default_factory=list)  # the guard's decisions on the prompt
    cache: str | None = None  # "hit" or "similar" when answered from the answer cache
    cache_key: bytes | None = None  # set when the answer may be kept for the project
    cache_ttl: float = 0.0
    similarity: float | None = None  # a similar hit's cosine similarity
    # On a miss of a --similar project: the question (a similar.Question: its
    # conversation's hash and its words) and its unit vector, so the answer,
    # once kept, is found by the next rewording. Memory only, this call's life.
    question: Question | None = None
    question_vector: array[float] | None = None
    # A streamed request that waited for its model to load: the response already begun (its
    # headers and `: waiting` comments sent), which the answer — or a refusal, as an error event — continues.
    prepared: web.StreamResponse | None = None
    load_wait: float | None = None  # seconds it waited for a replica to load
    answer_id: str | None = None  # the id the answer gave the client (chatcmpl-…, msg_…, resp_…): router.answerid
    # A batch's line (handlers.Inside): priced at the model's batch_discount, its usage row given to keep_usage.
    batch_id: str | None = None
    keep_usage: Callable[[Usage], None] | None = None
    # The request's span while it is traced (router.trace); else the client's own trace (an OpenTelemetry
    # Context from its traceparent), passed on to the engine as it came.
    span: Span | None = None
    trace_parent: Context | None = None
    # What the gateway changed in the request so that it could be answered rather than refused (issue 25,
    # item 22): tools that run at OpenAI, left out; a max_tokens the context could not hold, lowered (asked, sent).
    tools_dropped: tuple[str, ...] = ()
    max_tokens_lowered: tuple[int, int] | None = None
    # The passages its knowledge bases gave it (router.knowledge.augment.Retrieved), to annotate the answer with.
    retrieved: Any = None
    # Who sent it: the connection's address, or the client a trusted proxy names (router.trusted_proxies);
    # None for a batch's line, which no connection sent.
    client: str | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"api": self.api, "stream": self.stream}
        if self.retries:
            detail["retries"] = self.retries
        if self.decided_by:
            detail["decided_by"] = self.decided_by
        if self.error:
            detail["error"] = self.error
        if self.served_model and self.served_model != self.model.name:
            detail["fallback_from"] = self.model.name
        if self.profile:
            detail["profile"] = self.profile
        if self.similarity is not None:
            detail["similarity"] = round(self.similarity, 4)
        if self.load_wait is not None:
            detail["load_wait_s"] = round(self.load_wait, 3)
        if self.estimated:
            detail["estimated"] = list(self.estimated)
        if self.batch_id:
            detail["batch"] = self.batch_id
        if self.client:
            detail["client"] = self.client
        if self.delivered_tokens is not None and self.delivered_tokens < self.completion_tokens:
            detail["delivered_tokens"] = self.delivered_tokens
        if self.tools_dropped:
            detail["tools_dropped"] = list(self.tools_dropped)
        if self.images:
            detail["images"] = self.images
        if self.max_tokens_lowered is not None:
            detail["max_tokens_lowered"] = {"asked": self.max_tokens_lowered[0], "sent": self.max_tokens_lowered[1]}
        decisions = list(self.guard_decisions)
        if self.checker is not None:
            decisions += self.checker.decisions
        if decisions:
            detail["guard"] = [d.as_dict() for d in decisions]
        return detail


TOOLS_DROPPED_HEADER = "X-Llmgw-Tools-Dropped"
MAX_TOKENS_LOWERED_HEADER = "X-Llmgw-Max-Tokens-Lowered"


def changed_headers(call: Call) -> dict[str, str]:
    """Headers that tell the client what the gateway changed in its request (docs/api-shapes.md)."""
    headers = {}
    if call.tools_dropped:
        headers[TOOLS_DROPPED_HEADER] = ", ".join(call.tools_dropped)
    if call.max_tokens_lowered is not None:
        headers[MAX_TOKENS_LOWERED_HEADER] = "{}->{}".format(*call.max_tokens_lowered)
    return headers


def replicas_failing(entry: ModelEntry) -> Refuse:
    """Every endpoint of the model is passed over by its breaker: refused now, saying when to come back.

    Waiting in admission would hold the client for a queue's TTL and end in
    504, though nothing it could wait for frees up before the breakers let a
    trial through; the client is better told when that is.
    """
    retry = max(1, math.ceil(entry.retry_in()))
    return Refuse(503, f"every replica of {entry.name} is failing ({entry.failing_reason()}), so it takes no "
                       f"requests for now; try again in {retry} s", "replicas_failing",
                  headers={"Retry-After": str(retry)}, decided_by="breaker")
