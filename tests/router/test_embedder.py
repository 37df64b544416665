"""The router's Embedder: the catalog's embedding model at its local endpoints, never an outside provider's.

Against a real `llmgw sim-engine` (its own hash embeddings: no model to load).
"""

from __future__ import annotations

import aiohttp
import pytest

from llmgw.config.router import ModelSettings
from llmgw.router.breaker import Breaker
from llmgw.router.embedder import CatalogEmbedder, EmbeddingFailed
from llmgw.router.endpoint import Endpoint
from llmgw.router.registry import ModelEntry
from llmgw.router.similar import embed_question
from tests.support.pgcluster import free_port
from tests.support.simengines import Sim  # a real `llmgw sim-engine`


@pytest.fixture(scope="module")
def sim():
    s = Sim("--model", "embed").start()
    yield s
    s.stop()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


def endpoint(url: str, **kw) -> Endpoint:
    return Endpoint(id=kw.pop("id", url), model="embed", url=url, upstream_model="embed", breaker=Breaker(1, 30),
                    **kw)


def model(*endpoints: Endpoint) -> ModelEntry:
    return ModelEntry(ModelSettings(name="embed"), list(endpoints))


async def test_a_question_is_embedded_by_the_models_local_endpoint(sim, session):
    local = endpoint(sim.base_url)
    vector = await CatalogEmbedder(session, model(local)).embed("How do I reset my password?")
    assert len(vector) > 0 and all(isinstance(x, float) for x in vector)
    assert local.in_flight == 0 and local.breaker.state == "closed"


async def test_a_replica_that_is_down_is_passed_over_for_one_that_answers(sim, session):
    down = endpoint(f"http://127.0.0.1:{free_port()}/v1")
    up = endpoint(sim.base_url)
    embedder = CatalogEmbedder(session, model(down, up))
    assert await embedder.embed("hello") and await embedder.embed("hello again")
    assert down.breaker.state == "open" and down.in_flight == 0  # counted as a client's failure would be
    assert up.breaker.state == "closed"


async def test_an_outside_provider_is_never_sent_a_question(sim, session):
    # The provider here is the sim itself: were it asked, it would answer.
    provider = endpoint(sim.base_url, id="external:embed", external=True)
    with pytest.raises(EmbeddingFailed) as failed:
        await CatalogEmbedder(session, model(provider)).embed("my account number is 12345")
    assert "no local endpoint" in str(failed.value)
    assert CatalogEmbedder.local(model(provider)) == []


async def test_an_endpoint_that_refuses_the_request_costs_the_lookup_not_its_breaker(sim, session):
    wrong = Endpoint(id="wrong", model="embed", url=sim.base_url, upstream_model="not-this-one",
                     breaker=Breaker(1, 30))
    assert await embed_question(CatalogEmbedder(session, model(wrong)), "hello") is None  # the sim's 404
    assert wrong.breaker.state == "closed" and wrong.in_flight == 0
