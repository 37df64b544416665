"""What a control plane does with the plugins it loads: each into its seam, a scorer's profiles with it."""

from __future__ import annotations

import logging

import pytest

from llmgw.control.plugins import load_server_plugins
from llmgw.router.scheduler import profiles, scorers, unregister_profile, unregister_scorer
from tests.fixtures.plugindist import install_plugin

RACK = '''
class Rack:
    """Prefer replicas in the rack nearest the control plane."""

    name = "rack"
    profiles = {"nearby": ({"rack": 5.0, "queue": 1.0}, "the nearest rack, then the shortest queue"),
                "wrong": ({"rack": 1.0, "nowhere": 1.0}, "names a scorer nobody has")}

    def score(self, endpoint, ctx):
        return 0.0
'''


@pytest.fixture
def rack_installed(tmp_path, monkeypatch):
    install_plugin(tmp_path, "rack-routing", {"rackrouting.py": RACK}, {"llmgw.scorers": {"rack": "rackrouting:Rack"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    unregister_profile("nearby")
    unregister_scorer("rack")


def test_a_scorer_plugins_profiles_are_registered_with_it_and_a_bad_one_is_said(rack_installed, caplog):
    with caplog.at_level(logging.WARNING, logger="llmgw.plugins"):
        found = load_server_plugins()
    assert "rack" in scorers() and found.provided("llmgw.scorers")[-1] == "rack"
    assert profiles()["nearby"].weights == (("rack", 5.0), ("queue", 1.0))
    assert "wrong" not in profiles()
    assert [r.getMessage() for r in caplog.records] == [
        "the profile wrong of the scorer rack was not added: the profile wrong names the scorer nowhere, which is "
        "not registered; the scorers are kv, latency, prefix, queue, rack, session"]
