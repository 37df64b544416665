"""The sim-engine's HTTP side: routes, the failure knobs, and pacing streams in time.

Built on aiohttp's low-level server (one handler, a dict of routes) rather
than web.Application: no middleware chain or route matching per request,
which is a measurable share of a request that does nothing else.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time

import orjson
from aiohttp import web

from llmgw.sim import pictures, plans, wire
from llmgw.sim.config import SimConfig
from llmgw.sim.metrics import Metrics
from llmgw.sim.plans import Refused

_JSON = {"Content-Type": "application/json"}
_SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_RETRY = {"Content-Type": "application/json", "Retry-After": "1"}


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    # 429 and 503 say when to come back, as engines and providers do, so a
    # router's back-off has a header to read.
    headers = _RETRY if status in (429, 503) else _JSON
    return web.Response(status=status, body=wire.error_body(status, message, param, code), headers=headers)


class Engine:
    def __init__(self, cfg: SimConfig, semantic=None, cache=None):
        self.cfg = cfg
        self.semantic = semantic  # a semantic.SemanticModel, or None for hashed vectors
        self.cache = cache  # a prefixcache.PrefixCache (--tokenizer), or None
        self.metrics = Metrics(cfg.model, cache)
        self._model_json = orjson.dumps(cfg.model)
        self._interval = cfg.interval
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()
        self._models = wire.models_body(cfg.model, int(time.time()), cfg.context_length)
        self._routes = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/v1/images/generations"): self._images,
            ("GET", "/v1/models"): self._list_models,
            ("GET", "/health"): self._health,
            ("GET", "/metrics"): self._metrics,
        }
        self._paths = {path for _, path in self._routes}
        self._loaded_at = time.monotonic() + cfg.loading

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        route = self._routes.get((request.method, request.path))
        if route is None:
            if request.path in self._paths:
                return _error(405, f"{request.path} does not take {request.method}.")
            return _error(404, f"The sim-engine has no {request.path}; it serves /v1/chat/completions, "
                               "/v1/completions, /v1/embeddings, /v1/images/generations, /v1/models, /health and "
                               "/metrics.")
        if self.cfg.headers_log and request.path.startswith("/v1/"):
            self._log_headers(request)
        if request.path.startswith("/v1/") and (self.cfg.api_keys or self.cfg.refused_keys):
            refusal = self._check_key(request)
            if refusal is not None:
                return refusal
        try:
            return await route(request)
        except Refused as r:
            return _error(r.status, r.message, r.param, r.code)

    def _log_headers(self, request: web.BaseRequest) -> None:
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        line = json.dumps({"method": request.method, "path": request.path, "headers": headers})
        # One write of one line, in append mode: lines from requests at once do not interleave.
        with open(self.cfg.headers_log or "", "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def _check_key(self, request: web.BaseRequest) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else ""
        status = self.cfg.refused_keys.get(key)
        if status is not None:
            return _error(status, f"This sim-engine was started to refuse this key with {status} (--refuse-key).")
        if self.cfg.api_keys and key not in self.cfg.api_keys:
            said = "the request had none" if not key else "the request's key is not one of them"
            return _error(401, f"This sim-engine takes only the API keys it was started with (--api-key); {said}.")
        return None

    async def _body(self, request: web.BaseRequest) -> dict:
        """The request's JSON, once the failure knobs have had their say."""
        cfg = self.cfg
        if cfg.hang:
            await self._hang()
        if cfg.fail_status is not None:
            raise Refused(cfg.fail_status,
                          f"This sim-engine was started to fail every request with {cfg.fail_status} (--fail-status).")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise Refused(400, f"The request body is not valid JSON: {e}.") from None
        if not isinstance(body, dict):
            raise Refused(400, "The request body must be a JSON object.")
        return body

    async def _hang(self) -> None:
        # Held until the client gives up (aiohttp cancels this handler when
        # the connection closes) or the engine stops.
        self.metrics.waiting += 1
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self.metrics.waiting -= 1

    def _prefill(self, body: dict, plan) -> float:
        """With a prefix cache: the request's blocks looked up and kept, its usage made the cache's (the prompt's
        own tokens, and those found), and the seconds its uncached tokens add to the first token's time (what
        moves the start of its schedule)."""
        if self.cache is None:
            return 0.0
        prompt, found = self.cache.admit(body)
        if prompt:
            plan.cached = found
            if isinstance(plan, plans.ChatPlan):
                plan.prompt_tokens = prompt
            elif len(plan.prompts) == 1:
                plan.prompts = [prompt]
        return self.cache.prefill_seconds(prompt, found)

    def _new_id(self, kind: str) -> str:
        return f"{kind}-{self._id_prefix}{next(self._ids):012x}"

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        start = asyncio.get_running_loop().time()
        body = await self._body(request)
        plan = plans.chat_plan(body, self.cfg)
        start += self._prefill(body, plan)
        rid = self._new_id("chatcmpl")
        created = int(time.time())
        self.metrics.prompt_tokens += plan.prompt_tokens
        if plan.stream:
            events, trailer = wire.chat_events(rid, created, self._model_json, plan)
            return await self._stream(request, start, events, trailer)
        return await self._answer(request, start, plan.completion_tokens,
                                  lambda: wire.chat_body(rid, created, self.cfg.model, plan))

    async def _completions(self, request: web.BaseRequest) -> web.StreamResponse:
        start = asyncio.get_running_loop().time()
        body = await self._body(request)
        plan = plans.completion_plan(body, self.cfg)
        start += self._prefill(body, plan)
        rid = self._new_id("cmpl")
        created = int(time.time())
        self.metrics.prompt_tokens += plan.prompt_tokens
        if plan.stream:
            events, trailer = wire.completion_events(rid, created, self._model_json, plan)
            return await self._stream(request, start, events, trailer, per_event=len(plan.prompts))
        return await self._answer(request, start, plan.count,
                                  lambda: wire.completion_body(rid, created, self.cfg.model, plan),
                                  per_token=len(plan.prompts))

    async def _embeddings(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await self._body(request)
        if self.semantic is not None:
            return await self._semantic_embeddings(body)
        plan = plans.embedding_plan(body, self.cfg)
        self.metrics.prompt_tokens += plan.prompt_tokens
        return web.Response(body=wire.embedding_body(self.cfg.model, plan), headers=_JSON)

    async def _semantic_embeddings(self, body: dict) -> web.StreamResponse:
        plan = plans.semantic_plan(body, self.cfg, self.semantic.dimensions)
        self.metrics.prompt_tokens += plan.prompt_tokens
        self.metrics.running += 1
        try:
            # The model's forward pass blocks for milliseconds to seconds;
            # in a thread, so /health and streams keep answering meanwhile.
            vectors = await asyncio.to_thread(self.semantic.encode, plan.texts)
        finally:
            self.metrics.running -= 1
        return web.Response(body=wire.semantic_embedding_body(self.cfg.model, plan, vectors), headers=_JSON)

    async def _images(self, request: web.BaseRequest) -> web.StreamResponse:
        """An outside provider's pictures in OpenAI's shape, for the router's pass-through: `n` PNGs of `size`, a
        pattern of the prompt (pictures.py)."""
        body = await self._body(request)
        return web.Response(body=pictures.images_body(body, self.cfg.model), headers=_JSON)

    async def _list_models(self, request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=self._models, headers=_JSON)

    async def _health(self, request: web.BaseRequest) -> web.StreamResponse:
        if time.monotonic() < self._loaded_at:
            return _error(503, "the model is still loading (--load-seconds).")
        return web.Response(body=b"")

    async def _metrics(self, request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=self.metrics.render(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _answer(self, request, start: float, count: int, body, per_token: int = 1) -> web.StreamResponse:
        """A non-streamed answer, sent when its last token would have been."""
        cfg = self.cfg
        cut = cfg.cut_after is not None and cfg.cut_after < count
        if cfg.cut_after is not None and cut:
            count = cfg.cut_after
        self.metrics.running += 1
        try:
            due = start + cfg.ttft + max(0, count - 1) * self._interval
            wait = due - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            self.metrics.generation_tokens += count * per_token
            if cut:
                # No answer at all: what a client sees when an engine dies mid-request.
                if request.transport is not None:
                    request.transport.abort()
                await asyncio.get_running_loop().create_future()  # cancelled as the connection goes
            return web.Response(body=body(), headers=_JSON)
        finally:
            self.metrics.running -= 1

    async def _stream(self, request, start: float, events: list[bytes], trailer: bytes,
                      per_event: int = 1) -> web.StreamResponse:
        """Send event i at start + ttft + i/rate, catching up in one write when late."""
        cfg = self.cfg
        cut = cfg.cut_after is not None and cfg.cut_after < len(events)
        if cut:
            events = events[:cfg.cut_after]
        stall = cfg.stall_after is not None and cfg.stall_after < len(events)
        if stall:
            events = events[:cfg.stall_after]
        loop = asyncio.get_running_loop()
        metrics = self.metrics
        metrics.running += 1
        try:
            first_due = start + cfg.ttft
            wait = first_due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            resp = web.StreamResponse(headers=_SSE)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            interval = self._interval
            sent, total = 0, len(events)
            try:
                while sent < total:
                    if interval:
                        now = loop.time()
                        due = first_due + sent * interval
                        if now < due:
                            await asyncio.sleep(due - now)
                            now = loop.time()
                        # Every event due by now goes in one write: sleeps that ran
                        # late never stretch the stream out (the schedule is
                        # against the start, not the previous token).
                        upto = min(total, max(sent + 1, int((now - first_due) / interval) + 1))
                    else:
                        upto = total
                    metrics.generation_tokens += (upto - sent) * per_event
                    if upto == total and not (cut or stall):
                        await resp.write_eof(b"".join(events[sent:upto]) + trailer)
                        return resp
                    await resp.write(b"".join(events[sent:upto]))
                    sent = upto
                if stall:
                    await loop.create_future()  # cancelled as the client hangs up
                if not cut:  # an answer of no token events still ends with its finish and [DONE]
                    await resp.write_eof(trailer)
                    return resp
                # Closed without [DONE] or the chunked terminator: an engine that died.
                if request.transport is not None:
                    request.transport.close()
                await loop.create_future()  # cancelled as the connection goes
            except ConnectionResetError:
                # The client went away; its stream ends here, quietly.
                return resp
            return resp
        finally:
            metrics.running -= 1
