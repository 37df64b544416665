"""The /v1 endpoints: read and check the request, route it, answer in the client's API shape.

Every request, refused or answered, ends in exactly one usage row (settled
in `finally`), so a limit, a breaker or a cut stream is in the record as
much as a good answer is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from aiohttp import ClientConnectionError, ClientPayloadError, web
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError
from aiohttp.typedefs import Handler

from llmgw.account import Principal
from llmgw.guard import Decisions, OutputChecker, OutputReview, Reviewers, check_input, review_input
from llmgw.router import capability, loading, reuse, scheduler, shapes, trace
from llmgw.router.admission import AdmissionTimeout
from llmgw.router.answerid import answer_id, stream_answer_id
from llmgw.router.apis import SHAPES, Shape
from llmgw.router.appkeys import PLANE, PRINCIPAL, REQUEST_ID
from llmgw.router.assembly import Assembler
from llmgw.router.augmenting import Augmenting
from llmgw.router.body import read_json
from llmgw.router.cacheaware import cached_prefix
from llmgw.router.call import Call, Refuse, changed_headers, replicas_failing
from llmgw.router.citing import StreamCitations
from llmgw.router.clientaddr import client_address
from llmgw.router.engineerror import refusal_message
from llmgw.router.fit import fit_max_tokens
from llmgw.router.guarded import ChunkGuard, guard_whole
from llmgw.router.media import images as media_images
from llmgw.router.media import workflows as media_workflows
from llmgw.router.media.runs import OnProgress
from llmgw.router.plane import ClientPlane
from llmgw.router.registry import ModelEntry
from llmgw.router.relay import CUT_EVENT, StreamScanner, relay
from llmgw.router.tally import settle_whole
from llmgw.router.translate.common import TranslateError
from llmgw.router.upstream import Opened, open_upstream
from llmgw.router.wire import JSON
from llmgw.store import Usage
from llmgw.telemetry import Tracing

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from llmgw.router.service import Router

log = logging.getLogger("llmgw.router")

PROFILE_HEADER = "x-llmgw-profile"
# Client closed request, as nginx writes it: the usage row says the client
# left, not that the engine failed.
CLIENT_GONE = 499
# aiohttp's errors for an engine whose side broke mid-answer: a cut, not a bug
# of ours. ServerDisconnectedError and ClientOSError are ClientConnectionErrors;
# a ConnectionResetError (the client left) is caught before these.
_ENGINE_BROKE = (ClientPayloadError, ClientConnectionError, ContentLengthError, TransferEncodingError)


# -- reading the request ----------------------------------------------------

def _model_name(body: JSON) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Refuse(400, 'the request needs "model": the name of a model (GET /v1/models lists them)',
                     "invalid_request", param="model")
    return model


def find_model(plane: ClientPlane, principal: Principal, name: str) -> ModelEntry:
    entry = plane.router.registry.model(name)
    if entry is None or not principal.limits.allows_model(name):
        if entry is not None:
            raise Refuse(403, f"this API key may not use the model {name}; GET /v1/models lists the ones it may",
                         "model_not_allowed", param="model")
        raise Refuse(404, f"there is no model {name} here; GET /v1/models lists the ones this key may use",
                     "model_not_found", param="model")
    return entry


def _whole_number(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Refuse(400, f"{field} must be a whole number of at least 1, got {value!r}", "invalid_request",
                     param=field)


def _check_max_tokens(entry: ModelEntry, upstream: JSON) -> None:
    longest = entry.settings.max_output_tokens
    for field in ("max_tokens", "max_completion_tokens"):
        value = upstream.get(field)
        if value is None:
            continue
        _whole_number(field, value)
        if longest and value > longest:
            raise Refuse(400, f"{field} {value} is more than {entry.name}'s longest answer, {longest} tokens; "
                              f"ask for {longest} or fewer", "max_tokens_too_large", param=field)


def _check_choices(upstream: JSON, most: int) -> None:
    """`n` and `best_of` within router.max_n: each choice costs the engine a request's worth of work."""
    for field in ("n", "best_of"):
        value = upstream.get(field)
        if value is None:
            continue
        _whole_number(field, value)
        if value > most:
            raise Refuse(400, f"{field} {value} asks for more answers than the {most} this gateway gives to one "
                              f"request (router.max_n); ask for {most} or fewer, or send several requests",
                         "too_many_choices", param=field)


# -- the handlers ------------------------------------------------------------

def handler(shape: Shape) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve(request.app[PLANE], shape, request[PRINCIPAL], request[REQUEST_ID], request)
    return handle


@dataclass(frozen=True)
class Inside:
    """A request made inside the gateway rather than read from a client: a batch's line (llmgw.router.batches),
    or a knowledge base's passages or question to embed (llmgw.router.knowledge).

    It takes the same path as a client's (limits, guardrails, routing, one
    usage row), in the profile and band it names; its usage row goes to
    `keep` rather than the usage writer, so that the line's result and its
    row are recorded together.
    """

    body: JSON
    profile: str
    band: str | None
    batch_id: str | None = None  # a batch's line is priced at its model's batch discount
    keep: Callable[[Usage], None] | None = None  # None: the usage row goes to the usage writer, as a client's
    # A workflow job's run: told each step of its progress, and sent to the replica its runner chose.
    on_progress: OnProgress | None = None
    pinned: str | None = None  # an endpoint's id


async def serve(plane: ClientPlane, shape: Shape, principal: Principal, request_id: str,
                request: web.Request | None, inside: Inside | None = None) -> web.StreamResponse:
    """One request, from reading it to its answer (or refusal) and its usage row: a client's (`request`),
    or one made inside the gateway (`inside`, with request None), whose answer is never streamed."""
    call: Call | None = None
    span, client_trace = trace.begin(plane.router.tracing, request, shape.api, request_id)
    early, early_code = 0, ""  # a request refused before it became a call: the status and code it got
    try:
        call = await _begin(plane, request, shape, principal, request_id, inside, span, client_trace)
        await _admit(plane, shape, call)
        return await _route(plane, request, shape, call)
    except Refuse as refused:
        early, early_code = refused.status, refused.code
        if call is not None:
            call.status = refused.status
            call.decided_by = call.decided_by or refused.decided_by
            call.error = refused.code
        else:
            # Refused before it named a usable model (bad JSON, no such
            # model): still one usage row, saying why.
            plane.router.refused_early(request_id, principal, shape.api, refused.status, refused.code,
                                       batch_id=inside.batch_id if inside else None,
                                       keep=inside.keep if inside else None)
        if call is not None and call.prepared is not None:
            return await loading.refuse_in_stream(call, refused)
        return shape.error(refused.status, refused.message, refused.code, refused.param,
                           {**refused.headers, **(changed_headers(call) if call is not None else {}),
                            "x-request-id": request_id})
    except asyncio.CancelledError:
        if call is not None:
            call.status = CLIENT_GONE
            call.error = "client_gone"
        raise
    except Exception:
        # A bug of ours: the log gets the traceback, the client a sentence
        # with the id to quote, never the traceback itself.
        log.exception("request %s failed inside llmgw", request_id)
        early, early_code = 500, "internal_error"
        failed = Refuse(500, f"llmgw failed to handle this request (request id {request_id}); "
                             "the administrator can look it up in the server's log", "internal_error")
        if call is not None:
            call.status, call.error = 500, "internal_error"
            if call.prepared is not None:
                return await loading.refuse_in_stream(call, failed)
        return shape.error(500, failed.message, failed.code, None, {"x-request-id": request_id})
    finally:
        if call is not None:
            if call.checker is not None:
                call.checker.cancel()  # judgments of an answer no one reads any more
            if not call.status:
                call.status = CLIENT_GONE
            plane.router.settle(call)
        if span is not None:
            if call is not None:
                trace.finish(span, call, call.status, call.error)
            else:
                trace.finish(span, None, early or CLIENT_GONE, early_code or "client_gone")


async def _begin(plane: ClientPlane, request: web.Request | None, shape: Shape, principal: Principal,
                 request_id: str, inside: Inside | None, span: trace.Span | None, client_trace: Context | None) -> Call:
    settings = plane.settings.current.router
    if inside is not None:
        body = inside.body
    else:
        assert request is not None
        body = await read_json(request, int(settings.max_body))
    name = _model_name(body)
    entry = find_model(plane, principal, name)
    retrieved = None
    augmenting = plane.router.augmenting
    if augmenting is not None and augmenting.asks(shape.api, body):
        # Before the shape's checks and the guardrails: the passages are then text the client sent.
        body, retrieved = await augmenting.augment(principal, shape.api, body)
    try:
        # What does not fit the endpoint's schema is refused before the
        # guardrails read it, rather than passed to the engine (shapes.py).
        upstream, stream, wants, dropped = shape.prepare(body, model=name, entry=entry)
    except (TranslateError, shapes.ShapeError) as e:
        raise Refuse(400, e.message, "invalid_request", param=e.param) from None
    capability.check(entry, shape.api, body, upstream)
    _check_max_tokens(entry, upstream)
    upstream, lowered = fit_max_tokens(upstream, shape.engine_api, entry.settings.context_length)
    _check_choices(upstream, settings.max_n)
    if inside is not None:
        if stream:
            raise Refuse(400, 'a batch\'s requests are answered whole: "stream" must be false or left out',
                         "invalid_request", param="stream")
        profile, band, headers = inside.profile, inside.band, None
    else:
        assert request is not None
        headers = request.headers
        profile = headers.get(PROFILE_HEADER) or entry.settings.profile or settings.default_profile
        band = principal.key.band
    if profile not in scheduler.profiles():
        known = ", ".join(sorted(scheduler.profiles()))
        raise Refuse(400, f"{PROFILE_HEADER}: there is no profile {profile}; the profiles are {known}",
                     "unknown_profile")
    call = Call(id=request_id, api=shape.api, principal=principal, model=entry, upstream_path=shape.upstream_path,
                upstream_body=upstream, stream=stream, wants_usage=wants, profile=profile,
                session_key=scheduler.session_key(upstream, headers) if profile == "chat" else None,
                band=band, client_body=body, span=span, trace_parent=client_trace)
    if inside is not None:
        call.batch_id, call.keep_usage = inside.batch_id, inside.keep
        call.on_progress, call.pinned = inside.on_progress, inside.pinned
    call.max_tokens_lowered = lowered
    call.tools_dropped = dropped
    call.retrieved = retrieved
    if request is not None:
        call.client = client_address(request, settings.trusted_proxies)
    if span is not None:
        trace.describe(span, call)
    return call


async def _admit(plane: ClientPlane, shape: Shape, call: Call) -> None:
    """The guardrails' patterns, the key's limits and budgets, then the judge and services on the prompt.

    Run once the call exists, so that a request they refuse is settled like
    any other: its usage row names the model asked and keeps the guardrails'
    decisions (a block first), which the Guardrails page and `ctl request ID`
    read. Refused before the call existed, it was a row with no model and no
    decision (issue 25, item 9).
    """
    router = plane.router
    principal = call.principal
    last_user = _guard_input(plane, shape, call)
    # claim() counts the request; with workers it may first ask the main process for a loan. The limits
    # keep their own (monotonic) clock; budgets are by the calendar.
    refusal = (router.limits.check(principal) or router.budgets.check(principal, time.time())
               or await router.limits.claim(principal))
    if refusal is not None:
        router.metrics.refused.labels(call.model.name, refusal.code).inc()
        raise Refuse(refusal.status, refusal.message, refusal.code,
                     headers={"Retry-After": str(refusal.retry_after)},
                     decided_by=f"{refusal.code}:{refusal.scope}")
    if last_user is not None:
        await _review_input(router, call, last_user)


def _guard_input(plane: ClientPlane, shape: Shape, call: Call) -> str | None:
    """The policies that apply read the prompt with their patterns: refuse, redact, or let it by as it is.

    Returns the latest user turn (as redacted) when a judge or a service is
    to read it too — after the limits, so a key over its limit costs no
    judgment — and None otherwise.
    """
    settings = plane.settings.current.guard
    if not settings.enabled or not (settings.default or settings.attach):
        return None
    policy = plane.router.guards.effective(settings, plane.settings.version, call.principal)
    if policy is None:
        return None
    # Messages and Responses are already in the chat shape the engine reads.
    span = trace.step(plane.router.tracing, call, "guard input") if call.span is not None else None
    result = check_input(policy, call.upstream_body, shape.engine_api)
    call.guard, call.guard_decisions = policy, list(result.decisions)
    if span is not None:
        trace.guarded(span, result.decisions, result.refusal.code if result.refusal is not None else None)
    if result.refusal is not None:
        # Settled like any call (serve's finally): its row, its metrics and the guardrail_blocked event.
        plane.router.metrics.refused.labels(call.model.name, result.refusal.code).inc()
        raise Refuse(result.refusal.status, result.refusal.message, result.refusal.code,
                     decided_by=f"guard:{result.refusal.rule}")
    call.upstream_body = result.body
    call.redactor = result.redactor
    reviewers = plane.router.reviewers
    if shape.answers_text and OutputChecker.needed(policy, result.redactor):
        decisions = Decisions()
        review = None
        if reviewers is not None and Reviewers.needed(policy, "output"):
            review = OutputReview(reviewers, policy, decisions, prompt=result.last_user)
        call.checker = OutputChecker(policy, result.redactor, review, decisions)
    return result.last_user if reviewers is not None and Reviewers.needed(policy, "input") else None


async def _review_input(router: Router, call: Call, text: str) -> None:
    """The policy's services, then its judge, on the prompt; refuse when one objects (or cannot answer, under
    fail: closed)."""
    reviewers, policy = router.reviewers, call.guard
    assert reviewers is not None and policy is not None  # _guard_input gives a text to review only then
    decisions = Decisions()
    for d in call.guard_decisions:
        decisions.add(d.rule, d.action, d.direction)
    span = trace.step(router.tracing, call, "guard review") if call.span is not None else None
    try:
        refusal = await review_input(reviewers, policy, text, decisions)
    except BaseException:
        trace.end(span, "review_failed")
        raise
    call.guard_decisions = decisions.items
    if span is not None:
        trace.guarded(span, decisions.items, refusal.code if refusal is not None else None)
    if refusal is not None:
        router.metrics.refused.labels(call.model.name, refusal.code).inc()
        raise Refuse(refusal.status, refusal.message, refusal.code, decided_by=f"guard:{refusal.rule}",
                     headers={"Retry-After": "1"} if refusal.status == 503 else None)


def _full(entry: ModelEntry, saturation: int) -> Callable[[], bool]:
    def full() -> bool:
        local = [e for e in entry.usable() if not e.external]
        # An outside provider never counts as full: its own 429 is the signal.
        if not local or len(local) < len(entry.usable()):
            return False
        open_ = [e for e in local if scheduler.available(e)]
        # Every replica passed over by its breaker: waiting would not bring one back, so the
        # request goes in and is refused at once (replicas_failing) instead of queueing 30 s.
        return bool(open_) and all(e.in_flight >= saturation for e in open_)
    return full


def _room(entry: ModelEntry, saturation: int) -> bool:
    usable = [e for e in entry.usable() if scheduler.available(e)]
    return bool(usable) and not (saturation and _full(entry, saturation)())


async def _route(plane: ClientPlane, request: web.Request | None, shape: Shape,
                 call: Call) -> web.StreamResponse:
    router = plane.router
    settings = plane.settings.current.router
    saturation = settings.admission.saturation
    if call.model.stopped:
        # Before the cache: a stopped model gives no answers, kept ones included.
        raise loading.stopped(call.model.name)
    reused = await reuse.from_cache(router, shape, call)
    if reused is not None:
        return reused
    waited = await loading.until_ready(router, request, call, settings.timeouts.load)
    entry = call.model
    if not _room(entry, saturation):
        # No room here: a fallback with room answers instead of a queue.
        for other in entry.settings.fallbacks:
            candidate = router.registry.model(other)
            if candidate and call.principal.limits.allows_model(other) and _room(candidate, saturation):
                call.served_model = other
                entry = candidate
                break
    served = entry
    # A model whose replicas are all failing still goes through admission: entering is what lets
    # those already waiting for it go too, each to be refused at once below (_full says not full).
    try:
        ticket = await router.admission.enter(served.name, call.band, _full(served, saturation))
    except AdmissionTimeout as e:
        raise Refuse(504, str(e), "queue_timeout", headers={"Retry-After": str(e.retry_after)},
                     decided_by=f"admission:{e.band}") from None
    try:
        if served.failing():  # its breakers opened while it waited its turn
            raise replicas_failing(served)
        if served.settings.comfyui is not None:
            # A ComfyUI model's requests are runs of its workflow, not an OpenAI body passed on (router.media).
            if shape.api == "images":
                async with asyncio.timeout(float(settings.timeouts.total)):
                    return await media_images.answer(plane, request, call, served)
            if shape.api == "workflows":
                return await media_workflows.answer(plane, call, served)
            raise Refuse(400, f"{served.name} runs a ComfyUI workflow; send it /v1/images/generations or "
                              "/v1/workflows/runs", "unsupported_capability", param="model")
        if shape.api == "workflows":
            raise Refuse(400, f"{served.name} runs no workflow; GET /v1/workflows lists the models that do",
                         "unsupported_capability", param="model")
        blocks, cached = await cached_prefix(router.registry, served, call.upstream_body, call.profile)
        candidates = scheduler.choose(served.usable(), call.profile, call.session_key, prompt_blocks=blocks,
                                      cached=cached)
        async with asyncio.timeout(float(settings.timeouts.total)):
            opened = await open_upstream(router.session_for(served), call, candidates, settings.timeouts,
                                         settings.retries, scheduler.take, events=router.events,
                                         tracing=router.tracing)
            call.endpoint = opened.endpoint
            call.ttft = opened.took
            try:
                answered = await _answer(plane, request, shape, call, opened)
                if waited and not answered.prepared:
                    answered.headers[loading.LOADING_HEADER] = call.model.name
                return answered
            finally:
                opened.endpoint.in_flight -= 1
                opened.response.release()
                if opened.span is not None:
                    trace.end(opened.span, call.error if call.status >= 500 else None)
    except TimeoutError:
        raise Refuse(504, f"the answer took longer than router.timeouts.total "
                          f"({settings.timeouts.total})", "upstream_timeout", decided_by="timeout") from None
    finally:
        ticket.release()


async def _answer(plane: ClientPlane, request: web.Request | None, shape: Shape, call: Call,
                  opened: Opened) -> web.StreamResponse:
    upstream = opened.response
    name = call.served_model or call.model.name
    if upstream.status >= 400:
        # The engine's own refusal of this request (too long a prompt, a bad
        # parameter): the client's to see, and no reason to doubt the engine.
        call.status = upstream.status
        call.error = "engine_refused"
        message = refusal_message(upstream.status, opened.first, name)
        if call.prepared is not None:  # the stream began while the model loaded: the refusal ends it
            raise Refuse(upstream.status, message, "engine_refused", decided_by="engine")
        return shape.error(upstream.status, message, "engine_refused", None,
                           {**changed_headers(call), "x-request-id": call.id})
    if not call.stream or request is None:
        response = await _whole(shape, call, opened, name, plane.router.tracing, plane.router.augmenting)
        reuse.keep(plane.router, shape, call, opened.first)
        return response
    return await _stream(plane, request, shape, call, opened, name)


async def _whole(shape: Shape, call: Call, opened: Opened, name: str, tracing: Tracing,
                 augmenting: Augmenting | None = None) -> web.Response:
    try:
        answer = orjson.loads(opened.first)
    except orjson.JSONDecodeError:
        call.status = 502
        raise Refuse(502, f"the engine for {name} answered something that is not JSON", "upstream_invalid",
                     decided_by="upstream_error") from None
    call.status = 200
    headers = {**changed_headers(call), "x-request-id": call.id}
    engine_answer = answer
    if call.checker is not None and isinstance(answer, dict):
        span = trace.step(tracing, call, "guard output") if call.span is not None else None
        try:
            answer = await guard_whole(call.checker, answer)
        except BaseException:
            trace.end(span, "review_failed")
            raise
        if span is not None:
            trace.guarded(span, call.checker.decisions,
                          "guardrail_blocked" if call.checker.stopped is not None else None)
    settle_whole(call, engine_answer, answer)
    sent, body = shape.whole(call, answer, opened.first)
    if call.retrieved is not None and isinstance(sent, dict) and augmenting is not None:
        sent = augmenting.annotate(call.api, sent, call.retrieved)
        body = orjson.dumps(sent)
    call.answer_id = answer_id(sent)
    return web.Response(body=body, content_type="application/json", headers=headers)


async def _stream(plane: ClientPlane, request: web.Request, shape: Shape, call: Call, opened: Opened,
                  name: str) -> web.StreamResponse:
    settings = plane.settings.current.router
    response = call.prepared
    if response is None:
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
            **changed_headers(call), "x-request-id": call.id})
        await response.prepare(request)
    guard = ChunkGuard(call.checker) if call.checker is not None else None
    # The engine's events, passed on as they are (scanned) or translated into the client's API shape.
    stream = shape.stream(call, guard)
    transform = stream.scan if isinstance(stream, StreamScanner) else stream.transform
    # A judge or a service on the answer is awaited before its end is sent.
    atransform = None
    if guard is not None and guard.awaits:
        atransform = stream.ascan if isinstance(stream, StreamScanner) else stream.atransform
    assembler = Assembler() if call.cache_key is not None else None
    if assembler is not None:
        inner, ainner = transform, atransform

        def transform(block: bytes) -> bytes:
            assembler.feed_sse(block)  # before the usage event is dropped: a kept answer has it
            return inner(block)

        if ainner is not None:
            async def atransform(block: bytes) -> bytes:
                assembler.feed_sse(block)
                return await ainner(block)

    citing = None
    if call.retrieved is not None and plane.router.augmenting is not None:
        citing = StreamCitations(plane.router.augmenting, call.api, call.retrieved)
        plain, aplain = transform, atransform

        def transform(block: bytes) -> bytes:
            return citing.cite(plain(block))

        if aplain is not None:
            async def atransform(block: bytes) -> bytes:
                return citing.cite(await aplain(block))

    def first_token() -> None:
        call.first_token_at = time.perf_counter()

    looks = 3

    async def write(out: bytes) -> None:
        # The answer's id is in the first event the client gets: read from the
        # first writes only, never parsing a whole stream for it.
        nonlocal looks
        if looks:
            call.answer_id = stream_answer_id(out)
            looks = 0 if call.answer_id else looks - 1
        await response.write(out)

    call.status = 200
    try:
        await relay(opened.first, opened.response.content.readany, write,
                    idle=float(settings.timeouts.idle), transform=transform, on_first=first_token,
                    atransform=atransform)
        ended = stream.done
        if not ended:
            call.status, call.error = 502, "upstream_cut"
    except TimeoutError:
        call.status, call.error, call.decided_by = 504, "upstream_idle", "timeout"
    except (ConnectionResetError, asyncio.CancelledError):
        call.status, call.error = CLIENT_GONE, "client_gone"
        stream.tally.settle()  # what the engine made before the client left is billed
        raise
    except _ENGINE_BROKE:
        call.status, call.error = 502, "upstream_cut"
    if isinstance(stream, StreamScanner):
        stream.finish()
        if call.status != 200:
            await _write_quietly(response, CUT_EVENT)
    else:
        tail = stream.finish() if call.status == 200 else stream.cut(
            "the engine stopped before the answer was complete")
        if citing is not None and call.status == 200:
            tail = citing.cite(tail)  # a translated stream's [DONE] is in its tail
        await _write_quietly(response, tail)
    try:
        await response.write_eof()
    except ConnectionResetError:
        call.status = CLIENT_GONE
    if assembler is not None:
        reuse.keep(plane.router, shape, call, assembler.answer())
    return response


async def _write_quietly(response: web.StreamResponse, data: bytes) -> None:
    if not data:
        return
    try:
        await response.write(data)
    except ConnectionResetError:
        pass


def add_routes(app: web.Application) -> None:
    for shape in SHAPES:
        if shape.route:  # a workflow's run has none: it is made as a job (router/media/jobs.py)
            app.router.add_post(shape.route, handler(shape))
