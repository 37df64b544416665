"""Reading each engine's own /metrics, so the scheduler sees queues other routers fill.

This router knows only what it sent itself (Endpoint.in_flight). The engine
knows everything it holds, from every control plane, and how full its KV
cache is; vLLM, llama.cpp (with --metrics) and SGLang all say so in
Prometheus text. Each local endpoint is read every `interval`, with a short
timeout: a figure that comes late is no use to a choice made now.

An engine that does not answer keeps its last figures, which go stale (the
scheduler believes them for LOAD_MAX_AGE, about three reads) and is asked
less often, doubling up to a minute, so a replica that is down or starting
is not asked every two seconds by every router.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import math
import time
from collections.abc import Callable, Iterable

import aiohttp

from llmgw.connecterror import connect_failure
from llmgw.router.endpoint import Endpoint, EngineLoad
from llmgw.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# The figures each engine gives, by the names it gives them under. vLLM
# renamed gpu_cache_usage_perc to kv_cache_usage_perc (0.10); both are 0..1.
RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio",
            "sglang:token_usage")
# Counters since the engine started, in prompt tokens. vLLM renamed gpu_prefix_cache_* (0.10).
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
TTFT_SUM = ("vllm:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_sum")
TTFT_COUNT = ("vllm:time_to_first_token_seconds_count", "sglang:time_to_first_token_seconds_count")
WANTED = frozenset(RUNNING + WAITING + KV_USAGE + PREFIX_QUERIES + PREFIX_HITS + TTFT_SUM + TTFT_COUNT)

MAX_BACKOFF = 60.0
# vLLM's page is some hundreds of KB with its histograms; far more is not a metrics page.
MAX_BYTES = 8 << 20


def metrics_url(url: str) -> str:
    """The engine's /metrics beside its OpenAI base URL: http://h:8000/v1 -> http://h:8000/metrics."""
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/metrics"


def parse_metrics(text: str, wanted: frozenset[str] = WANTED) -> dict[str, list[float]]:
    """The samples of the wanted metrics in Prometheus text, one value per label set.

    Only what is needed of the format: comments skipped, labels read past
    (a quoted value may hold spaces, braces or escaped quotes), the value is
    the first field after them and a timestamp after it is ignored.
    """
    samples: dict[str, list[float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            if name not in wanted:
                continue
            end = _labels_end(line, brace)
            if end == -1:
                continue
            rest = line[end + 1:]
        else:
            if space == -1:
                continue
            name = line[:space]
            if name not in wanted:
                continue
            rest = line[space:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            samples.setdefault(name, []).append(value)
    return samples


def _labels_end(line: str, start: int) -> int:
    quoted = False
    i = start + 1
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "}":
            return i
        i += 1
    return -1


def load_from(samples: dict[str, list[float]], read_at: float) -> EngineLoad | None:
    """An EngineLoad from parsed samples, or None when the page said nothing we read.

    Counts are summed over label sets (an engine serving with data
    parallelism gives one per rank); a usage ratio is averaged over them,
    since the sum of two halves-full caches is not a full one.
    """
    def first(names: tuple[str, ...]) -> list[float] | None:
        return next((samples[n] for n in names if n in samples), None)

    def total(names: tuple[str, ...]) -> float | None:
        found = first(names)
        return sum(found) if found is not None else None

    running, waiting, kv = first(RUNNING), first(WAITING), first(KV_USAGE)
    if running is None and waiting is None and kv is None:
        return None
    return EngineLoad(
        running=sum(running or ()),
        waiting=sum(waiting or ()),
        kv_usage=min(1.0, max(0.0, sum(kv) / len(kv))) if kv else None,
        read_at=read_at,
        prefix_queries=total(PREFIX_QUERIES), prefix_hits=total(PREFIX_HITS),
        ttft_sum=total(TTFT_SUM), ttft_count=total(TTFT_COUNT),
    )


# Every counter as an engine starts: `since` it, a rate over the engine's life.
ENGINE_STARTED = EngineLoad(prefix_queries=0.0, prefix_hits=0.0, ttft_sum=0.0, ttft_count=0.0)


def since(load: EngineLoad, before: EngineLoad | None) -> EngineLoad:
    """`load` with the prefix cache's hit rate and the mean time to first token since the `before` read.

    An interval with no prompt and no first token keeps the figures of the one before it, so a quiet moment
    does not erase what the engine last showed; counters that went back (the engine restarted) start afresh.
    """
    if before is None:
        return load
    rate = _share(load.prefix_hits, before.prefix_hits, load.prefix_queries, before.prefix_queries,
                  before.prefix_hit_rate)
    ttft = _share(load.ttft_sum, before.ttft_sum, load.ttft_count, before.ttft_count, before.engine_ttft)
    return dataclasses.replace(load, prefix_hit_rate=rate, engine_ttft=ttft)


def _share(part: float | None, part_before: float | None, whole: float | None, whole_before: float | None,
           last: float | None) -> float | None:
    """(part - part_before) / (whole - whole_before) of two counters; `last` when nothing was counted between."""
    if part is None or part_before is None or whole is None or whole_before is None:
        return last
    grown, added = whole - whole_before, part - part_before
    if grown < 0 or added < 0:
        return None  # the engine started again; its counters with it
    return added / grown if grown > 0 else last


# The failure of an engine never read that is logged: after about 4 + 8 + 16 s
# of backoff, by when an agent back from the last run has said what is gone.
NEVER_READ_SAID_AT = 4


@dataclasses.dataclass
class _Backoff:
    failures: int = 0
    next_at: float = 0.0


class EngineScraper:
    def __init__(self, session: aiohttp.ClientSession, endpoints: Callable[[], Iterable[Endpoint]],
                 interval: float = 2.0, timeout: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self._endpoints = endpoints
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self._backoff: dict[str, _Backoff] = {}
        self._answered: set[str] = set()  # metrics URLs read at least once
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="llmgw engine metrics")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:
                log.exception("reading the engines' metrics failed; trying again in %.0f s", self.interval)
            await asyncio.sleep(self.interval)

    async def poll(self) -> None:
        """One round: read every local endpoint's metrics that is due, all at once."""
        by_url: dict[str, list[Endpoint]] = {}
        for endpoint in self._endpoints():
            if not endpoint.external:
                by_url.setdefault(metrics_url(endpoint.url), []).append(endpoint)
        for url in list(self._backoff):
            if url not in by_url:
                del self._backoff[url]  # a replica gone; if it comes back it starts afresh
        self._answered &= set(by_url)
        now = self._clock()
        due = [url for url in by_url if self._backoff.get(url, _Backoff()).next_at <= now]
        await asyncio.gather(*(self._scrape(url, by_url[url]) for url in due))

    def backoff(self, url: str) -> float:
        """Seconds until the engine at this metrics URL is asked again (0: at the next round)."""
        state = self._backoff.get(url)
        return max(0.0, state.next_at - self._clock()) if state else 0.0

    async def _scrape(self, url: str, endpoints: list[Endpoint]) -> None:
        key = next((e.api_key for e in endpoints if e.api_key), None)
        try:
            load = await _read_page(self._session, url, key, self.timeout, self._clock())
        except aiohttp.ClientConnectorError as e:
            # Not aiohttp's sentence: it carries "ssl:default" and the call's repr.
            self._failed(url, "nothing listens there" if e.os_error.errno == errno.ECONNREFUSED
                         else connect_failure(e))
            return
        except (TimeoutError, aiohttp.ClientError, _Unread) as e:
            self._failed(url, str(e) or type(e).__name__)
            return
        self._backoff.pop(url, None)
        self._answered.add(url)
        for endpoint in endpoints:
            endpoint.load = since(load, endpoint.load)

    def _failed(self, url: str, why: str) -> None:
        state = self._backoff.setdefault(url, _Backoff())
        state.failures += 1
        delay = min(MAX_BACKOFF, self.interval * 2 ** state.failures)
        state.next_at = self._clock() + delay
        # Said once as it starts failing, not every round while it stays down. One
        # never read yet is most often a replica the store still lists from the last
        # run, whose agent has not said it is gone (start-up logged every one), or
        # one still loading: said only if it stays unread for about half a minute.
        said_at = 1 if url in self._answered else NEVER_READ_SAID_AT
        level = logging.INFO if state.failures == said_at else logging.DEBUG
        log.log(level, "the engine's metrics at %s could not be read (%s); asking again in %.0f s",
                url, why, delay)


class _Unread(Exception):
    pass


async def _read_page(session: aiohttp.ClientSession, url: str, key: str | None, timeout: float,
                     read_at: float) -> EngineLoad:
    """One engine's metrics page: its figures, or _Unread (or aiohttp's error) saying why not."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
        if response.status != 200:
            raise _Unread(f"answered {response.status}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(1 << 16):
            body += chunk
            if len(body) > MAX_BYTES:
                raise _Unread(f"sent more than {MAX_BYTES >> 20} MB")
    load = load_from(parse_metrics(body.decode("utf-8", "replace")), read_at)
    if load is None:
        raise _Unread("gave none of the running, waiting or KV cache figures")
    return load


async def read_once(session: aiohttp.ClientSession, base_url: str, key: str | None,
                    timeout: float = 1.5) -> EngineLoad | None:
    """The figures of the engine at `base_url` (its OpenAI base), read now, its rates over its whole life since it
    started; None when it did not say them."""
    try:
        load = await _read_page(session, metrics_url(base_url), key, timeout, 0.0)
    except (TimeoutError, aiohttp.ClientError, OSError, _Unread):
        return None
    return None if load is None else since(load, ENGINE_STARTED)
