"""The judge: a guard model of the catalog (Qwen3Guard-Gen) reads a prompt or an answer and says if it is safe.

It is asked on the gateway's own account with an ordinary chat completion
to one of the judge model's replicas, and answers in Qwen3Guard-Gen's words:

    Safety: Unsafe
    Categories: Violent, Jailbreak
    Refusal: No            (only when it read an answer)

A policy reads that: the text is unsafe when the judge says Unsafe (or
Controversial, where the policy counts that as unsafe) and names one of
the policy's categories. A judgment has the policy's `latency_budget`,
every try included; past it `JudgeUnavailable` is raised and the gate does
what the policy's `fail` says.

Within the budget, three things the Go original learnt (CHANGELOG v0.14.7):

- A replica that hangs must not cost the request. When the first replica
  has not answered by half the budget, the same question goes to another
  replica too — another machine's where there is one — and the first answer
  wins. The first is not cut short: on a slow machine that would throw away
  answers about to arrive.
- A new leader knows no judge for its first seconds, and a judge that was
  restarting refuses connections. When every replica fails at once they are
  asked again every 250 ms while the budget lasts, instead of answering
  every request of those seconds with 503 under `fail: closed`. A replica
  that is only slow is not asked again: that doubles its work.
- The same text is not asked twice within five minutes (an LRU of
  judgments by the text's hash; never the text itself).

Breakers are read but not obeyed: five failed tries open a replica's breaker
for 30 s, and at one try every 250 ms a judge coming back after two seconds
would stay shut out for half a minute — exactly the new-leader case.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict
from urllib.parse import urlsplit

import aiohttp
import orjson

from llmgw.config import JudgePolicy
from llmgw.guard.replica import JudgeReplica

if TYPE_CHECKING:
    from llmgw.events import Events

log = logging.getLogger("llmgw.guard.judge")

SAFE, UNSAFE, CONTROVERSIAL = "Safe", "Unsafe", "Controversial"
HEDGE_AT = 0.5  # of the budget: when a second replica is asked as well
RETRY_EVERY = 0.25  # seconds between rounds when every replica failed at once
CACHE_TTL = 300.0
CACHE_SIZE = 10_000  # judgments remembered; each is a digest and a few words
STREAM_EVERY = 600  # characters of a streamed answer between judgments
# What one judgment reads at most. Qwen3Guard-0.6B on CPUs reads about 120
# tokens a second (280 tokens: 2.3 s on four cores), so a long text is cut
# into pieces judged side by side rather than one that passes any budget —
# or that overflows the judge's context and is refused, leaving the text
# unjudged.
MAX_CHARS = 4000
OVERLAP = 300  # characters two pieces share, so a sentence across the cut is read whole once
PROMPT_TAIL = 2000  # of the user's prompt, as context when an answer is judged
MAX_TOKENS = 48  # "Safety: Unsafe\nCategories: Violent, Jailbreak\nRefusal: No" is about 20


class JudgeUnavailable(Exception):
    """No judgment within the budget; the gate applies the policy's `fail`."""

    def __init__(self, model: str, budget: float, attempts: int, reason: str) -> None:
        super().__init__(f"the judge {model} gave no judgment within {budget:g} s ({reason})")
        self.model, self.budget, self.attempts, self.reason = model, budget, attempts, reason


@dataclass(frozen=True)
class Judgment:
    """What the judge model said, before a policy reads it."""

    label: str  # Safe, Unsafe or Controversial
    categories: tuple[str, ...] = ()
    refusal: bool | None = None  # answers only: whether the answer refused


@dataclass(frozen=True)
class Verdict:
    """A policy's reading of a judgment. Never holds the text it is about."""

    safe: bool
    categories: tuple[str, ...]  # every category the judge named
    raw_label: str  # Safe, Unsafe or Controversial, as the judge said
    took: float  # seconds this judgment took (about 0 from the cache)
    matched: tuple[str, ...] = ()  # the policy's categories it named, as the policy spells them: why it is unsafe
    refusal: bool | None = None
    cached: bool = False
    endpoint: str | None = None  # the replica that answered; None from the cache

    @property
    def rule(self) -> str | None:
        """The decision's rule: `judge:Violent`; None when safe."""
        if self.safe:
            return None
        return f"judge:{self.matched[0]}" if self.matched else "judge:unsafe"


_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_SAFETY = re.compile(r"safety\W{0,6}(safe|unsafe|controversial)\b", re.IGNORECASE)
_CATEGORIES = re.compile(r"categor(?:y|ies)\W{0,6}([^\n\r]*)", re.IGNORECASE)
_REFUSAL = re.compile(r"refusal\W{0,6}(yes|no)\b", re.IGNORECASE)
_NONE = frozenset({"", "none", "n/a", "na", "null", "-"})


def parse_judgment(answer: str) -> Judgment:
    """Read a Qwen3Guard-Gen answer. Tolerates markdown, a thinking block, other casing and
    extra lines; raises ValueError when it says neither Safe, Unsafe nor Controversial."""
    text = _THINK.sub("", answer or "")
    safety = _SAFETY.search(text)
    if safety is None:
        raise ValueError("the judge's answer says neither Safe, Unsafe nor Controversial")
    label = {"safe": SAFE, "unsafe": UNSAFE, "controversial": CONTROVERSIAL}[safety.group(1).lower()]
    categories: list[str] = []
    found = _CATEGORIES.search(text)
    if found:
        for part in re.split(r"[,;|]", found.group(1)):
            name = part.strip().strip("*_`'\".[]() ").strip()
            if name.lower() not in _NONE and name not in categories:
                categories.append(name)
    refusal = _REFUSAL.search(text)
    return Judgment(label, tuple(categories), None if refusal is None else refusal.group(1).lower() == "yes")


def _norm(category: str) -> str:
    # "Suicide & Self-Harm", "suicide and self harm" and "Suicide&Self-harm" are one category.
    return re.sub(r"[^a-z0-9]", "", category.lower().replace(" and ", "&"))


def read(policy: JudgePolicy, judgment: Judgment, took: float = 0.0, *, cached: bool = False,
         endpoint: str | None = None) -> Verdict:
    """The policy's verdict on a judgment: unsafe when Unsafe (or Controversial counted unsafe)
    and it names one of the policy's categories."""
    # Matched categories are named as the policy spells them: they become
    # rules and metric labels, which must stay bounded by configuration
    # whatever the judge writes.
    wanted = {_norm(c): c for c in policy.categories}
    matched = tuple(dict.fromkeys(wanted[_norm(c)] for c in judgment.categories if _norm(c) in wanted))
    flagged = judgment.label == UNSAFE or (judgment.label == CONTROVERSIAL and policy.controversial == "unsafe")
    return Verdict(safe=not (flagged and matched), categories=judgment.categories, raw_label=judgment.label,
                   took=took, matched=matched if flagged else (), refusal=judgment.refusal, cached=cached,
                   endpoint=endpoint)


def judges(policy: JudgePolicy, direction: str) -> bool:
    """Whether the policy's judge reads this direction ("input" or "output")."""
    return policy.on in (direction, "both")


def pieces(text: str, size: int = MAX_CHARS, overlap: int = OVERLAP) -> list[str]:
    """The text cut into what one judgment reads, neighbours sharing `overlap` characters."""
    if len(text) <= size:
        return [text]
    out, start = [], 0
    while start < len(text):
        out.append(text[start:start + size])
        if start + size >= len(text):
            break
        start += size - overlap
    return out


def host_of(endpoint: JudgeReplica) -> str:
    """The machine a replica runs on, as far as its URL says."""
    try:
        return urlsplit(endpoint.url).hostname or endpoint.url
    except ValueError:
        return endpoint.url


class _Failed(Exception):
    """One try at one replica that gave no judgment: the sentence says why, never the text."""


class Judge:
    def __init__(self, session: aiohttp.ClientSession, endpoints: Callable[[str], Sequence[JudgeReplica]], *,
                 events: Events | None = None, clock: Callable[[], float] = time.monotonic,
                 cache_size: int = CACHE_SIZE, cache_ttl: float = CACHE_TTL,
                 retry_every: float = RETRY_EVERY, hedge_at: float = HEDGE_AT) -> None:
        self._session = session
        self._endpoints = endpoints
        self._events = events
        # For the cache's five minutes and a verdict's `took`; the budget runs
        # on the event loop's clock. Tests of the speed check pass one of their own.
        self._clock = clock
        self._cache_size, self._cache_ttl = cache_size, cache_ttl
        self.retry_every = retry_every
        self.hedge_at = hedge_at  # of the budget; 1 or more never asks a second replica while one is pending
        self._cache: OrderedDict[bytes, tuple[float, Judgment]] = OrderedDict()
        self._asking: dict[bytes, asyncio.Task[tuple[Judgment, str]]] = {}
        self._turn = 0
        self.asked = 0  # requests sent to replicas, for metrics and tests

    # --- one text ----------------------------------------------------------

    async def judge(self, policy: JudgePolicy, text: str, *, prompt: str | None = None) -> Verdict:
        """The policy's verdict on `text`. With `prompt`, `text` is the answer to it and is judged
        as one (Qwen3Guard's response moderation: the prompt as user, the answer as assistant).
        Raises JudgeUnavailable when no judgment came within the budget."""
        started = self._clock()
        if not text.strip():
            return Verdict(True, (), SAFE, 0.0)
        parts = pieces(text)
        if len(parts) == 1:
            judgment, cached, endpoint = await self._judgment(policy, text, prompt)
            return read(policy, judgment, self._clock() - started, cached=cached, endpoint=endpoint)
        found = await asyncio.gather(*(self._judgment(policy, p, prompt) for p in parts), return_exceptions=True)
        verdicts = [read(policy, *f[:1], cached=f[1], endpoint=f[2]) for f in found if isinstance(f, tuple)]
        worst = next((v for v in verdicts if not v.safe), None)
        if worst is None:
            # One piece unjudged leaves the text unjudged, unless another piece already objects.
            error = next((f for f in found if isinstance(f, BaseException)), None)
            if error is not None:
                raise error
            worst = max(verdicts, key=_severity)
        categories = tuple(dict.fromkeys(c for v in verdicts for c in v.categories))
        return Verdict(worst.safe, categories, worst.raw_label, self._clock() - started, worst.matched,
                       worst.refusal, all(v.cached for v in verdicts), worst.endpoint)

    def judge_stream(self, policy: JudgePolicy, *, prompt: str | None = None,
                     every: int = STREAM_EVERY) -> StreamJudgment:
        """A judgment that follows an answer as it streams: feed() it the text as it comes."""
        return StreamJudgment(self, policy, prompt, every)

    # --- the cache, and one question asked once ------------------------------

    async def _judgment(self, policy: JudgePolicy, text: str, prompt: str | None
                        ) -> tuple[Judgment, bool, str | None]:
        key = _digest(policy.model, text, prompt)
        hit = self._cache.get(key)
        if hit is not None:
            if self._clock() - hit[0] < self._cache_ttl:
                self._cache.move_to_end(key)
                return hit[1], True, None
            del self._cache[key]
        task = self._asking.get(key)
        if task is None:
            # Requests asking about the same text at once (a retried request, a
            # popular prompt) share one question rather than each sending it.
            task = asyncio.ensure_future(self._ask(policy, text, prompt))
            self._asking[key] = task
            task.add_done_callback(lambda t: self._asked(key, t))
            judgment, endpoint = await asyncio.shield(task)
            return judgment, False, endpoint
        budget = float(policy.latency_budget)
        try:
            judgment, endpoint = await asyncio.wait_for(asyncio.shield(task), budget)
        except TimeoutError:
            raise JudgeUnavailable(policy.model, budget, 0, "the same text was being judged and took longer") from None
        return judgment, False, endpoint

    def _asked(self, key: bytes, task: asyncio.Task[tuple[Judgment, str]]) -> None:
        self._asking.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # a failure is not remembered: the next request asks again
        if self._cache_size <= 0:
            return
        self._cache[key] = (self._clock(), task.result()[0])
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # --- asking replicas within the budget -----------------------------------

    async def _ask(self, policy: JudgePolicy, text: str, prompt: str | None) -> tuple[Judgment, str]:
        loop = asyncio.get_running_loop()
        budget = float(policy.latency_budget)
        start = loop.time()
        deadline, hedge_at = start + budget, start + budget * self.hedge_at
        body = _body(text, prompt)
        pending: dict[asyncio.Task[Judgment], JudgeReplica] = {}
        failed: set[str] = set()  # replicas that failed in this round
        errors: dict[str, str] = {}
        hedged, attempts, known = False, 0, False
        try:
            while True:
                now = loop.time()
                if now >= deadline:
                    raise self._unavailable(policy, budget, attempts, errors, pending, known)
                if not pending:
                    endpoint = self._pick(policy.model, exclude=failed, avoid=())
                    if endpoint is None:
                        # Every replica failed (or none is known yet): all again shortly.
                        known = known or bool(self._endpoints(policy.model))
                        await asyncio.sleep(min(self.retry_every, deadline - now))
                        failed.clear()
                        continue
                    known = True
                    pending[self._start(endpoint, body, deadline)] = endpoint
                    attempts += 1
                elif not hedged and now >= hedge_at:
                    hedged = True
                    busy = {e.id for e in pending.values()}
                    endpoint = self._pick(policy.model, exclude=failed | busy,
                                          avoid={host_of(e) for e in pending.values()})
                    if endpoint is not None:
                        pending[self._start(endpoint, body, deadline)] = endpoint
                        attempts += 1
                wake = deadline if hedged else hedge_at
                done, _ = await asyncio.wait(pending, timeout=max(0.0, wake - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    endpoint = pending.pop(task)
                    error = task.exception()
                    if error is None:
                        return task.result(), endpoint.id
                    failed.add(endpoint.id)
                    errors[endpoint.id] = str(error)
        finally:
            for task in pending:  # the answer is in; the others' work is wasted from here
                task.cancel()

    def _pick(self, model: str, exclude: set[str], avoid: set[str] | Sequence[str]) -> JudgeReplica | None:
        """The replica to ask: one whose breaker is closed, on another machine than `avoid`,
        with the fewest requests in flight; ties taken in turn so judgments spread."""
        candidates = [e for e in self._endpoints(model) if e.id not in exclude]
        if not candidates:
            return None
        self._turn += 1
        n = len(candidates)

        def rank(item: tuple[int, JudgeReplica]) -> tuple[bool, bool, int, int]:
            i, e = item
            breaker = e.breaker
            shut = breaker is not None and not breaker.available()
            return (shut, host_of(e) in avoid, e.in_flight, (i - self._turn) % n)
        return min(enumerate(candidates), key=rank)[1]

    def _start(self, endpoint: JudgeReplica, body: _Question, deadline: float) -> asyncio.Task[Judgment]:
        self.asked += 1
        return asyncio.ensure_future(self._call(endpoint, body, deadline))

    async def _call(self, endpoint: JudgeReplica, body: _Question, deadline: float) -> Judgment:
        loop = asyncio.get_running_loop()
        headers = {"Content-Type": "application/json"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
        sent = time.perf_counter()
        endpoint.in_flight += 1
        try:
            timeout = aiohttp.ClientTimeout(total=max(0.001, deadline - loop.time()))
            async with self._session.post(endpoint.url.rstrip("/") + "/chat/completions",
                                          data=orjson.dumps({**body, "model": endpoint.upstream_model}),
                                          headers=headers, timeout=timeout) as response:
                raw = await response.read()
                if response.status != 200:
                    raise _Failed(f"answered {response.status}")
            content = orjson.loads(raw)["choices"][0]["message"]["content"]
            judgment = parse_judgment(content)
        except TimeoutError:
            raise _Failed("did not answer within the budget") from None
        except aiohttp.ClientError as e:
            raise _Failed(f"connection failed: {type(e).__name__}") from None
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Failed("answered something that is not a judgment") from None
        finally:
            endpoint.in_flight -= 1
        endpoint.observe_ttft(time.perf_counter() - sent)
        return judgment

    def _unavailable(self, policy: JudgePolicy, budget: float, attempts: int, errors: dict[str, str],
                     pending: dict[asyncio.Task[Judgment], JudgeReplica], known: bool) -> JudgeUnavailable:
        if not known and not errors:
            reason = "no replica of it is ready"
        else:
            said = [f"{eid}: {why}" for eid, why in errors.items()]
            said += [f"{e.id}: still judging" for e in pending.values() if e.id not in errors]
            reason = "; ".join(said) or "no replica answered"
            reason = f"{attempts} tries; {reason}"
        error = JudgeUnavailable(policy.model, budget, attempts, reason)
        log.warning("judge_unavailable: %s", error)
        if self._events is not None:
            self._events.emit("judge_unavailable", subject=policy.model, model=policy.model,
                              budget_s=budget, attempts=attempts, reason=reason)
        return error


def _severity(verdict: Verdict) -> int:
    return {SAFE: 0, CONTROVERSIAL: 1, UNSAFE: 2}.get(verdict.raw_label, 0)


def _digest(model: str, text: str, prompt: str | None) -> bytes:
    h = hashlib.sha256()
    for part in (model, "answer" if prompt is not None else "prompt", prompt or "", text):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


class _Message(TypedDict):
    role: str
    content: str


class _Question(TypedDict):
    """The chat request a replica is sent, less its `model`: that is the replica's own name for it."""

    messages: list[_Message]
    max_tokens: int
    temperature: int
    stream: bool


def _body(text: str, prompt: str | None) -> _Question:
    messages: list[_Message]
    if prompt is None:
        messages = [{"role": "user", "content": text}]
    else:
        messages = [{"role": "user", "content": prompt[-PROMPT_TAIL:]}, {"role": "assistant", "content": text}]
    return {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": False}


class StreamJudgment:
    """An answer judged while it streams: every `every` characters, and once more at its end.

    Each judgment reads what came since the last one, with the characters
    before it as context (so a sentence across the mark is read whole), not
    the whole answer again: a long answer would otherwise cost the judge
    the square of its length. Judgments run in the background; feed() never
    waits. The gate reads `unsafe` (or ready()) between the events it
    relays, and awaits close() at the end — with `stream: buffer_all` it
    holds everything until close() has answered.
    """

    def __init__(self, judge: Judge, policy: JudgePolicy, prompt: str | None, every: int = STREAM_EVERY,
                 context: int = OVERLAP) -> None:
        self._judge, self._policy, self._prompt = judge, policy, prompt
        self.every, self._context = every, context
        self._text: list[str] = []
        self._length = 0
        self._judged = 0  # characters covered by judgments started so far
        self._next = every
        self._tasks: list[asyncio.Task[Verdict]] = []
        self._results: asyncio.Queue[Verdict | BaseException] = asyncio.Queue()
        self._closed = False
        self.verdicts: list[Verdict] = []
        self.unsafe: Verdict | None = None  # the first unsafe verdict, as soon as it is known
        self.unavailable: JudgeUnavailable | None = None

    @property
    def requested(self) -> int:
        """Judgments started so far."""
        return len(self._tasks)

    def feed(self, delta: str) -> None:
        if self._closed:
            raise RuntimeError("fed after close()")
        if not delta:
            return
        self._text.append(delta)
        self._length += len(delta)
        if self._length >= self._next:
            self._request()
            self._next = (self._length // self.every + 1) * self.every

    def _request(self) -> None:
        whole = "".join(self._text)
        self._text = [whole]
        start = max(0, self._judged - self._context)
        self._judged = self._length
        task = asyncio.ensure_future(self._judge.judge(self._policy, whole[start:], prompt=self._prompt))
        task.add_done_callback(self._finished)
        self._tasks.append(task)

    def _finished(self, task: asyncio.Task[Verdict]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            verdict = task.result()
            self.verdicts.append(verdict)
            if not verdict.safe and self.unsafe is None:
                self.unsafe = verdict
            self._results.put_nowait(verdict)
        elif isinstance(error, JudgeUnavailable):
            self.unavailable = self.unavailable or error
            self._results.put_nowait(error)
        else:
            self._results.put_nowait(error)

    def ready(self) -> list[Verdict]:
        """The verdicts that came since the last call, without waiting. (Read verdicts either this
    way or with `async for`, not both: each is handed out once.)"""
        out = []
        while not self._results.empty():
            item = self._results.get_nowait()
            if isinstance(item, Verdict):
                out.append(item)
        return out

    async def __aiter__(self) -> AsyncIterator[Verdict]:
        """Verdicts as they come, until close() has been called and every judgment is in.
        A judgment that failed ends the iteration with its error."""
        taken = 0
        while True:
            if self._closed and taken >= len(self._tasks):
                return
            item = await self._results.get()
            taken += 1
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> Verdict:
        """Judge what is left and wait for every judgment: the first unsafe verdict, else the last.
        Raises JudgeUnavailable when one failed and none found the answer unsafe."""
        if not self._closed:
            self._closed = True
            if self._length > self._judged or not self._tasks:
                self._request()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.unsafe is not None:
            return self.unsafe
        for task in self._tasks:
            error = task.exception()
            if error is not None:
                raise error
        return self.verdicts[-1] if self.verdicts else Verdict(True, (), SAFE, 0.0)

    def cancel(self) -> None:
        """The client went away: stop asking."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
