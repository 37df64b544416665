"""The router's record of what requests ask of the catalog, as the leader's placement reads it each pass."""

from __future__ import annotations

from llmgw.router.demand import DemandRecord


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_request_waiting_for_a_model_asks_for_it_from_when_the_first_began_until_a_replica_is_ready():
    clock = Clock()
    demand = DemandRecord(clock)
    with demand.asking("picture"):
        clock.now += 3
        with demand.asking("picture"):
            asked, _ = demand.read()
            assert asked == {"picture": 1000.0} and demand.waiting("picture") == 2
            demand.loaded("picture")
    assert demand.read()[0] == {}
    assert demand.waiting("picture") == 0


def test_an_ask_outlives_its_last_waiting_request_by_a_while_so_a_retry_finds_the_load_under_way():
    clock = Clock()
    demand = DemandRecord(clock, linger=30)
    with demand.asking("mesh"):
        clock.now += 5
    clock.now += 29
    assert demand.read()[0] == {"mesh": 1000.0}
    with demand.asking("mesh"):  # the client retried: still the first ask, kept
        clock.now += 40
        assert demand.read()[0] == {"mesh": 1000.0}
    clock.now += 31
    assert demand.read()[0] == {}


def test_each_request_for_a_catalog_model_marks_when_it_was_last_used():
    clock = Clock()
    demand = DemandRecord(clock)
    demand.used("picture")
    clock.now = 1060.0
    demand.used("mesh")
    asked, used = demand.read()
    assert asked == {} and used == {"picture": 1000.0, "mesh": 1060.0}
    used["picture"] = 0  # what read() hands out is a copy: placement cannot change the record
    assert demand.read()[1]["picture"] == 1000.0
