"""The answer cache on the client API's path: a kept answer to reuse, and the answer to keep.

`from_cache` is asked after the limits and the input guardrails, before
routing: the very same request, then (with `--similar`) a like question in
the same conversation. A reused answer is read by the request's output
policy before it is sent; `keep` files the engine's own answer afterwards,
unless the policy stopped it. `shape` is the handler's API shape (its
`api`: chat, completions, embeddings, messages, responses).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from llmgw.guard import OutputChecker
from llmgw.router import trace
from llmgw.router.answerid import stream_answer_id, whole_answer_id
from llmgw.router.cache import Entry as CacheEntry
from llmgw.router.cache import hit_headers
from llmgw.router.cache import key as answer_key
from llmgw.router.call import Call, changed_headers
from llmgw.router.guarded import guard_whole
from llmgw.router.replay import replay_json, replay_stream
from llmgw.router.similar import embed_question, question
from llmgw.router.wire import JSON
from llmgw.store import ProjectCache

if TYPE_CHECKING:
    from llmgw.router.apis import Shape
    from llmgw.router.service import Router


async def from_cache(router: Router, shape: Shape, call: Call) -> web.Response | None:
    """The project's kept answer to this very request — or, with `--similar`, to a like question in the
    same conversation — or None (and the call marked to keep its own).

    Limits and input guardrails have been checked by now. A policy that
    forbids keeping (no_store) or puts values back (restore) bypasses the
    cache, and nothing is embedded for it. A policy that reads the answer
    reads a reused one too, as it would the engine's: its rules, its judge
    and its services, before a byte of it is sent.
    """
    setting = router.project_caches.get(call.principal.path.project.id)
    if setting is None or not setting.enabled or not shape.cached:
        return None
    span = trace.step(router.tracing, call, "cache lookup") if call.span is not None else None
    try:
        found = await _look(router, shape, call, setting)
    except BaseException:
        trace.end(span, "cancelled")
        raise
    if span is not None:
        span.set_attribute("llmgw.cache.result", found if isinstance(found, str) else call.cache or "hit")
        trace.end(span)
    return found if isinstance(found, web.Response) else None


async def _look(router: Router, shape: Shape, call: Call, setting: ProjectCache) -> web.Response | str:
    """The kept answer, or what became of the lookup: bypass or miss."""
    cache = router.cache
    policy = call.guard
    if policy is not None and (policy.no_store or policy.restore):
        cache.note("bypass")
        return "bypass"
    if call.retrieved is not None:
        # Answered from knowledge bases: its annotations are made from this request's passages, which a kept
        # answer would not carry (docs/knowledge.md).
        cache.note("bypass")
        return "bypass"
    now = time.time()
    cache_key = answer_key(call.principal.path.project.id, shape.api, call.upstream_body)
    entry = cache.get(cache_key, now)
    similarity = None
    if entry is None and setting.similar:
        entry, similarity = await _similar(router, shape, call, setting.similar)
        now = time.time()
    if entry is None:
        cache.note("miss")
        call.cache_key, call.cache_ttl = cache_key, setting.ttl
        return "miss"
    call.cache = "hit" if similarity is None else "similar"
    cache.note(call.cache)
    call.status, call.similarity = 200, similarity
    headers = {**hit_headers(entry, now, similarity), **changed_headers(call), "x-request-id": call.id}
    if call.checker is not None:
        entry = await _checked(call.checker, entry)
    if call.stream:
        body = replay_stream(entry, shape.api, model=call.model.name, request=call.client_body,
                             include_usage=call.wants_usage)
        call.answer_id = stream_answer_id(body)
        return web.Response(body=body, headers={**headers, "Content-Type": "text/event-stream",
                                                "Cache-Control": "no-cache"})
    body = replay_json(entry, shape.api, model=call.model.name, request=call.client_body)
    call.answer_id = whole_answer_id(body)
    return web.Response(body=body, content_type="application/json", headers=headers)


async def _similar(router: Router, shape: Shape, call: Call,
                   threshold: float) -> tuple[CacheEntry | None, float | None]:
    """The answer to the question most like this one already answered in its conversation, and how alike.

    Asked only after the exact lookup missed, so the very same request
    embeds nothing. Not for completions (no conversation), nor a question
    similar.question() turns away (too long, a picture, after a tool's
    result). An embedding model that is not set, not this key's to use,
    slow or down costs this lookup, never the answer. On a miss the
    question and its vector stay on the call for _keep.
    """
    if not shape.conversational:
        return None, None
    asked = question(call.principal.path.project.id, shape.api, call.upstream_body)
    if asked is None:
        return None, None
    embedder = router.embedder(call.principal)
    if embedder is None:
        return None, None
    vector = await embed_question(embedder, asked.text, budget=router.embedding_budget)
    if vector is None:
        return None, None
    now = time.time()
    found = await router.similar.lookup(asked.conversation, vector, threshold, now)
    if found is not None:
        entry = router.cache.get(found[0], now)
        if entry is not None:
            return entry, found[1]
    call.question, call.question_vector = asked, vector
    return None, None


async def _checked(checker: OutputChecker, entry: CacheEntry) -> CacheEntry:
    """A kept answer read by the request's output policy, as a copy: the kept one stays as the engine gave it."""
    answer = orjson.loads(entry.answer)
    if not isinstance(answer, dict):
        return entry
    checked = await guard_whole(checker, answer)
    return CacheEntry(entry.api, orjson.dumps(checked), entry.stored_at, entry.ttl, entry.model)


def keep(router: Router, shape: Shape, call: Call, answer: JSON | bytes | None) -> None:
    if call.cache_key is None or answer is None or call.status != 200:
        return
    if call.checker is not None and call.checker.stopped is not None:
        return  # an answer the policy stopped is not one to give again
    kept = router.cache.put(call.cache_key, CacheEntry.make(shape.api, answer, stored_at=time.time(),
                                                            ttl=call.cache_ttl, model=call.model.name))
    asked, vector = call.question, call.question_vector
    if kept and asked is not None and vector is not None:  # set together, by _similar
        # The next rewording in this conversation finds this answer.
        router.similar.add(asked.conversation, vector, call.cache_key)
