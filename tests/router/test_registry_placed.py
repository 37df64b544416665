"""The registry holds the cluster's ready replicas beside the settings' own endpoints."""

from __future__ import annotations

from llmgw.config.router import ModelSettings
from llmgw.config.server import ClusterSettings
from llmgw.router.registry import Placed, Registry


def test_ready_replicas_are_endpoints_and_keep_what_was_learnt_across_a_settings_change():
    registry = Registry()
    registry.apply(ClusterSettings(models=[ModelSettings(name="static", endpoints=["http://10.0.0.1:8000/v1"])]))
    registry.set_placed({"qwen": Placed(ModelSettings(name="qwen"), (("s1", "http://10.0.0.7:8001/v1"),), "k")})
    entry = registry.model("qwen")
    assert [e.url for e in entry.usable()] == ["http://10.0.0.7:8001/v1"]
    assert entry.endpoints[0].api_key == "k" and entry.endpoints[0].id == "qwen/s1"
    entry.endpoints[0].in_flight = 3
    registry.apply(ClusterSettings(models=[]))  # a settings change leaves the cluster's replicas alone
    assert registry.model("static") is None and registry.model("qwen").endpoints[0].in_flight == 3
    registry.set_placed({"qwen": Placed(ModelSettings(name="qwen"), ())})
    assert registry.model("qwen").usable() == []


def test_a_model_in_the_settings_keeps_its_own_endpoints_over_a_catalog_model_of_that_name():
    registry = Registry()
    registry.apply(ClusterSettings(models=[ModelSettings(name="qwen", endpoints=["http://10.0.0.1:8000/v1"])]))
    registry.set_placed({"qwen": Placed(ModelSettings(name="qwen"), (("s1", "http://10.0.0.7:8001/v1"),))})
    assert [e.url for e in registry.model("qwen").endpoints] == ["http://10.0.0.1:8000/v1"]


def test_a_breaker_opened_by_failures_here_is_told_and_one_opened_from_elsewhere_is_not_told_again():
    one, other = Registry(), Registry()
    told: list[tuple[str, str]] = []
    for registry in (one, other):
        registry.apply(ClusterSettings(models=[ModelSettings(name="static", endpoints=["http://10.0.0.1:8000/v1"])]))
        # What a worker process does: pass it to the main process, which tells its siblings.
        registry.on_trip = lambda ident, reason, me=registry: (told.append((ident, reason)),
                                                              (other if me is one else one).trip(ident, reason))
    endpoint = one.model("static").endpoints[0]
    for _ in range(endpoint.breaker.failures):
        assert endpoint.breaker.allow()
        endpoint.breaker.failure("HTTP 500 from the engine")
    assert told == [("http://10.0.0.1:8000/v1", "HTTP 500 from the engine")]
    sibling = other.model("static").endpoints[0].breaker
    assert sibling.state == "open" and sibling.last_reason == "HTTP 500 from the engine"
