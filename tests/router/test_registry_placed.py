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
