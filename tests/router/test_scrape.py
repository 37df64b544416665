"""The router reads each engine's own /metrics: queues and KV cache, from vLLM, llama.cpp and SGLang."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web

from llmgw.router.endpoint import Endpoint, EngineLoad
from llmgw.router.scrape import EngineScraper, metrics_url, parse_metrics

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 5.0
vllm:num_requests_running{engine="1",model_name="llama"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 2.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.3
vllm:num_requests_running_other 99
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="llama"} 12.0
"""

OLD_VLLM = 'vllm:num_requests_running{model_name="m"} 1\nvllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'

LLAMACPP = """\
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.75
llamacpp:requests_processing 4
llamacpp:requests_deferred 6
"""

SGLANG = """\
sglang:num_running_reqs{model_name="qwen",label="a b } c"} 7.0 1712345678000
sglang:num_queue_reqs{model_name="qwen"} 1.0
sglang:token_usage{model_name="qwen"} 0.9
"""


class Engines:
    """Little engines on 127.0.0.1, each serving a metrics page (or failing), counting the reads."""

    def __init__(self) -> None:
        self.pages: dict[str, str | int] = {}
        self.reads: dict[str, int] = {}

    async def metrics(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.reads[name] = self.reads.get(name, 0) + 1
        page = self.pages[name]
        if isinstance(page, int):
            return web.Response(status=page, text="no")
        return web.Response(text=page, content_type="text/plain")


@pytest.fixture
async def engines():
    state = Engines()
    app = web.Application()
    app.router.add_get("/{name}/metrics", state.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    yield state
    await runner.cleanup()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def engine(engines: Engines, name: str, page: str | int, **kw) -> Endpoint:
    engines.pages[name] = page
    url = f"{engines.base}/{name}/v1"
    return Endpoint(id=url, model="llama", url=url, upstream_model="llama", **kw)


def test_the_metrics_page_is_beside_the_openai_base_url():
    assert metrics_url("http://10.0.0.7:8000/v1") == "http://10.0.0.7:8000/metrics"
    assert metrics_url("http://10.0.0.7:8000/v1/") == "http://10.0.0.7:8000/metrics"
    assert metrics_url("http://10.0.0.7:8000") == "http://10.0.0.7:8000/metrics"


def test_only_the_figures_asked_for_are_read_and_labels_are_read_past():
    samples = parse_metrics(SGLANG + VLLM)
    assert samples["sglang:num_running_reqs"] == [7.0]
    assert samples["vllm:num_requests_running"] == [5.0, 3.0]
    assert "vllm:num_requests_running_other" not in samples


async def test_each_engine_kind_s_queue_and_kv_cache_are_read(engines, session):
    clock = Clock()
    vllm, old, llama, sglang = (engine(engines, "vllm", VLLM), engine(engines, "old", OLD_VLLM),
                                engine(engines, "llama", LLAMACPP), engine(engines, "sglang", SGLANG))
    scraper = EngineScraper(session, lambda: [vllm, old, llama, sglang], clock=clock)
    await scraper.poll()
    # Counts summed over the engine's ranks; the usage averaged, not summed past full.
    assert vllm.load == EngineLoad(running=8, waiting=2, kv_usage=0.4, read_at=100.0)
    assert old.load == EngineLoad(running=1, waiting=0, kv_usage=0.25, read_at=100.0)
    assert llama.load == EngineLoad(running=4, waiting=6, kv_usage=0.75, read_at=100.0)
    assert sglang.load == EngineLoad(running=7, waiting=1, kv_usage=0.9, read_at=100.0)


async def test_outside_providers_are_not_asked_for_metrics(engines, session):
    provider = engine(engines, "provider", VLLM, external=True)
    await EngineScraper(session, lambda: [provider]).poll()
    assert engines.reads == {} and provider.load.read_at == 0


async def test_an_engine_that_does_not_answer_keeps_its_old_figures_and_is_asked_less_often(engines, session):
    clock = Clock()
    replica = engine(engines, "flaky", VLLM)
    scraper = EngineScraper(session, lambda: [replica], interval=2.0, clock=clock)
    await scraper.poll()
    assert replica.load.read_at == 100.0

    engines.pages["flaky"] = 503
    clock.now += 2
    await scraper.poll()
    assert replica.load.read_at == 100.0 and replica.load.running == 8  # stale, not zeroed
    assert engines.reads["flaky"] == 2

    for _ in range(3):  # rounds within the backoff ask nothing
        clock.now += 1
        await scraper.poll()
    assert engines.reads["flaky"] == 2

    clock.now += 1  # 4 s after the failure
    await scraper.poll()
    assert engines.reads["flaky"] == 3
    assert scraper.backoff(metrics_url(replica.url)) == 8.0  # doubling

    engines.pages["flaky"] = VLLM
    clock.now += 8
    await scraper.poll()
    assert replica.load.read_at == clock.now and scraper.backoff(metrics_url(replica.url)) == 0


async def test_an_engine_that_is_not_listening_is_backed_off_too(session):
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing there
    gone = Endpoint(id=url, model="llama", url=url, upstream_model="llama")
    scraper = EngineScraper(session, lambda: [gone], clock=Clock())
    await scraper.poll()
    assert gone.load.read_at == 0 and scraper.backoff("http://127.0.0.1:9/metrics") > 0


async def test_a_page_with_none_of_the_figures_counts_as_not_answering(engines, session):
    quiet = engine(engines, "quiet", "# nothing here\nprocess_cpu_seconds_total 3\n")
    scraper = EngineScraper(session, lambda: [quiet], clock=Clock())
    await scraper.poll()
    assert quiet.load.read_at == 0 and scraper.backoff(metrics_url(quiet.url)) > 0


async def test_the_scraper_reads_on_its_own_once_started(engines, session):
    replica = engine(engines, "live", LLAMACPP)
    scraper = EngineScraper(session, lambda: [replica], interval=0.01)
    scraper.start()
    try:
        for _ in range(500):
            if engines.reads.get("live", 0) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await scraper.stop()
    assert engines.reads["live"] >= 2 and replica.load.running == 4


def scraper_said(caplog) -> list:
    """The scraper's own log records: a client another test left unclosed can log from the
    garbage collector while this test runs (asyncio's "Task exception was never retrieved")."""
    return [r for r in caplog.records if r.name == "llmgw.router.scrape"]


async def test_a_last_runs_dead_engine_port_is_not_logged_at_start_until_it_stays_dead(session, caplog):
    # What start-up met: the store still listed the last run's replicas, their ports closed.
    url = "http://127.0.0.1:9/v1"
    stale = Endpoint(id=url, model="sim", url=url, upstream_model="sim")
    clock = Clock()
    scraper = EngineScraper(session, lambda: [stale], clock=clock)
    with caplog.at_level(logging.DEBUG, logger="llmgw.router.scrape"):
        for _ in range(3):
            await scraper.poll()
            clock.now += scraper.backoff("http://127.0.0.1:9/metrics")
        assert [r.levelno for r in scraper_said(caplog)] == [logging.DEBUG] * 3
        await scraper.poll()
    said = scraper_said(caplog)[-1]
    assert said.levelno == logging.INFO
    assert said.getMessage().startswith("the engine's metrics at http://127.0.0.1:9/metrics could not be read "
                                        "(nothing listens there); asking again in ")


async def test_an_engine_that_answered_and_then_went_away_is_logged_at_once(engines, session, caplog):
    replica = engine(engines, "lost", VLLM)
    clock = Clock()
    scraper = EngineScraper(session, lambda: [replica], clock=clock)
    await scraper.poll()
    engines.pages["lost"] = 503
    clock.now += 2
    with caplog.at_level(logging.INFO, logger="llmgw.router.scrape"):
        await scraper.poll()
    assert [r.getMessage() for r in scraper_said(caplog)] == [
        f"the engine's metrics at {metrics_url(replica.url)} could not be read (answered 503); asking again in 4 s"]


def vllm_page(running: int, queries: int, hits: int, ttft_sum: float, ttft_count: int) -> str:
    """vLLM 0.32's page as the CPU build wrote it, with the counters given."""
    return (f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0010986998718183205\n'
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {queries}.0\n'
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {hits}.0\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.04",model_name="tiny"}} {ttft_count}.0\n'
            f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="tiny"}} {ttft_sum}\n'
            f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="tiny"}} {ttft_count}.0\n')


async def test_the_prefix_caches_hits_and_time_to_first_token_are_what_happened_between_two_reads(engines, session):
    clock = Clock()
    vllm = engine(engines, "vllm", vllm_page(0, 490, 128, 0.1654, 8))
    scraper = EngineScraper(session, lambda: [vllm], clock=clock)
    await scraper.poll()
    assert (vllm.load.prefix_hits, vllm.load.prefix_queries) == (128, 490)
    assert vllm.load.prefix_hit_rate is None and vllm.load.engine_ttft is None, "one read says nothing of a rate"
    # 400 prompt tokens since, 300 of them found in the cache; two first tokens taking 0.5 s in all.
    engines.pages["vllm"] = vllm_page(1, 890, 428, 0.6654, 10)
    clock.now += 2
    await scraper.poll()
    assert vllm.load.prefix_hit_rate == pytest.approx(0.75)
    assert vllm.load.engine_ttft == pytest.approx(0.25)
    clock.now += 2
    await scraper.poll()  # nothing asked meanwhile: the last figures stand
    assert vllm.load.prefix_hit_rate == pytest.approx(0.75) and vllm.load.engine_ttft == pytest.approx(0.25)
    engines.pages["vllm"] = vllm_page(0, 10, 0, 0.01, 1)  # the engine started again
    clock.now += 2
    await scraper.poll()
    assert vllm.load.prefix_hit_rate is None and vllm.load.engine_ttft is None
