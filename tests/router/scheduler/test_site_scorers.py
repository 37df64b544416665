"""A site's own scorer and profile are registered the way the built-ins are."""

from __future__ import annotations

import pytest
from routing_endpoints import NOW, replica

from llmgw.router.scheduler import (
    choose,
    register_profile,
    register_scorer,
    scorers,
    unregister_profile,
    unregister_scorer,
)


class Rack:
    """Prefer replicas in the rack nearest the control plane."""

    name = "rack"

    def score(self, endpoint, ctx) -> float:
        return 0.0 if endpoint.id.startswith("http://10.0.0.2:") else 1.0


class Broken:
    name = "broken"

    def score(self, endpoint, ctx) -> float:
        raise RuntimeError("a bug in the site's scorer")


@pytest.fixture
def site():
    added_scorers, added_profiles = [], []

    def scorer(s):
        register_scorer(s)
        added_scorers.append(s.name)

    def profile(name, weights):
        register_profile(name, weights)
        added_profiles.append(name)

    yield scorer, profile
    for name in added_profiles:
        unregister_profile(name)
    for name in added_scorers:
        unregister_scorer(name)


def test_a_sites_own_profile_orders_replicas_by_its_own_scorer(site):
    scorer, profile = site
    scorer(Rack())
    profile("nearby", {"rack": 5.0, "queue": 1.0})
    near, far = replica(2, in_flight=3), replica(1)
    assert choose([far, near], "nearby", None, now=NOW)[0] is near


def test_a_scorer_that_fails_counts_as_neutral_and_routing_goes_on(site):
    scorer, profile = site
    scorer(Broken())
    profile("fragile", {"broken": 1.0, "queue": 1.0})
    busy, idle = replica(1, in_flight=4), replica(2)
    assert choose([busy, idle], "fragile", None, now=NOW)[0] is idle


def test_a_profile_naming_a_scorer_nobody_registered_is_refused():
    with pytest.raises(ValueError, match="names the scorer speed, which is not registered; the scorers are "):
        register_profile("quick", {"speed": 1.0})


def test_a_second_scorer_of_a_built_ins_name_is_refused_unless_meant():
    with pytest.raises(ValueError, match="replace=True"):
        register_scorer(type("Q", (), {"name": "queue", "score": lambda self, e, c: 0.0})())
    assert type(scorers()["queue"]).__name__ == "QueueScorer"
