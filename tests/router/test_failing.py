"""A model whose every replica is passed over is refused at once.

And a replica is asked itself before one key's failures open it.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.router import BreakerSettings, ModelSettings, RouterSettings
from llmgw.config.server import ClusterSettings
from llmgw.config.types import Duration
from llmgw.router import probe
from llmgw.router.call import replicas_failing
from llmgw.router.registry import Registry

TWO = ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]


def registry_of(endpoints: list[str], **breaker) -> Registry:
    registry = Registry()
    registry.apply(ClusterSettings(models=[ModelSettings(name="qwen", endpoints=endpoints)],
                                   router=RouterSettings(breaker=BreakerSettings(**breaker))))
    return registry


def test_a_model_is_failing_only_when_every_replica_is_passed_over():
    entry = registry_of(TWO, failures=1).model("qwen")
    assert not entry.failing()
    entry.endpoints[0].breaker.failure("connection failed: ClientConnectorError")
    assert not entry.failing()
    entry.endpoints[1].breaker.failure("connection failed: ClientConnectorError")
    assert entry.failing()


def test_a_model_with_no_endpoint_at_all_is_not_called_failing():
    assert not registry_of([]).model("qwen").failing()


def test_the_refusal_says_the_replicas_are_failing_and_when_to_come_back():
    entry = registry_of(TWO[:1], failures=1, open_for=Duration("20s")).model("qwen")
    entry.endpoints[0].breaker.failure("connection failed: ClientConnectorError")
    refused = replicas_failing(entry)
    assert refused.status == 503 and refused.code == "replicas_failing"
    assert refused.headers["Retry-After"] in ("19", "20")
    assert refused.message.startswith("every replica of qwen is failing (connection failed: ClientConnectorError)")
    assert f"try again in {refused.headers['Retry-After']} s" in refused.message


def test_distinct_keys_reaches_the_breakers_and_changes_live():
    registry = registry_of(TWO[:1], distinct_keys=3)
    breaker = registry.model("qwen").endpoints[0].breaker
    assert breaker.distinct_keys == 3
    registry.apply(ClusterSettings(models=[ModelSettings(name="qwen", endpoints=TWO[:1])],
                                   router=RouterSettings(breaker=BreakerSettings(distinct_keys=1))))
    assert registry.model("qwen").endpoints[0].breaker is breaker and breaker.distinct_keys == 1


@pytest.fixture
async def engine():
    """A real HTTP server on loopback whose /v1/models answers with the status set on it."""
    state = {"status": 200}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []}, status=state["status"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    state["url"] = f"http://127.0.0.1:{port}/v1"
    yield state
    await runner.cleanup()


async def _probed(url: str, status_note: str = "answered 500") -> str:
    endpoint = registry_of([url], failures=1).model("qwen").endpoints[0]
    async with aiohttp.ClientSession() as session:
        assert endpoint.breaker.failure(status_note, "key-a") is True  # one key: ask the replica
        probe.check(session, endpoint, status_note)
        probe.check(session, endpoint, status_note)  # one probe at a time
        assert len(probe._running) == 1
        await asyncio.gather(*probe._running.values())
    return endpoint.breaker.state


async def test_a_replica_whose_health_check_answers_stays_in_use(engine):
    assert await _probed(engine["url"]) == "closed"


async def test_a_replica_whose_health_check_fails_too_is_passed_over(engine):
    engine["status"] = 503
    assert await _probed(engine["url"]) == "open"


async def test_a_replica_that_no_longer_listens_is_passed_over_after_one_key_s_failures():
    from tests.support.pgcluster import free_port

    assert await _probed(f"http://127.0.0.1:{free_port()}/v1") == "open"


def test_a_model_whose_every_replica_is_failing_is_not_full_so_its_waiters_go_in_to_be_refused():
    from llmgw.router.handlers import _full

    entry = registry_of(TWO, failures=1).model("qwen")
    full = _full(entry, 1)
    entry.endpoints[0].in_flight = 1
    entry.endpoints[1].breaker.failure("connection failed: ClientConnectorError")
    assert full(), "the one replica left is at saturation: wait for it"
    entry.endpoints[0].breaker.failure("connection failed: ClientConnectorError")
    assert not full(), "nothing to wait for: waiting would end in a 504 after the queue's TTL"
