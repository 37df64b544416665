"""The leader's reconciler tells the webhooks of a replica that failed and of a node lost, once each."""

from __future__ import annotations

import time

from llmgw.control.agentsvc import AgentService, Node
from llmgw.control.catalog import Policy
from llmgw.control.reconciler import Reconciler
from llmgw.events import Events
from llmgw.protocol import Register
from llmgw.store import Replica


def _reconciler(store, told: list, clock=time.time) -> tuple[Reconciler, AgentService]:
    events = Events(leading=lambda: True, clock=clock)
    events.subscribe(told.append)
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(store, agents, leading=lambda: True, registry=lambda: None,
                            policy=lambda: Policy(lost_after=30.0), startup_timeout=lambda: 60.0, events=events)
    return reconciler, agents


async def test_a_replica_whose_start_times_out_is_told_failed_once_with_its_model_and_node(store):
    told: list = []
    reconciler, _ = _reconciler(store, told)
    now = time.time()
    reconciler.replicas["r1"] = Replica("r1", "qwen", "node-a", state="starting", since=now - 61, created_at=now - 61)
    reconciler.replicas["r2"] = Replica("r2", "qwen", "node-b", state="starting", since=now - 5, created_at=now - 5)

    reconciler._time_out_starts(now)
    reconciler._time_out_starts(now + 1)  # failed already: not told again

    assert [(e.kind, e.subject) for e in told] == [("replica_failed", "r1")]
    fields = told[0].fields
    assert fields["model"] == "qwen" and fields["node_id"] == "node-a"
    assert fields["reason"].startswith("no progress for 60 s while starting")


async def test_a_node_away_past_node_lost_after_is_told_lost_once_until_it_connects_again(store):
    told: list = []
    wall = [1000.0]
    reconciler, agents = _reconciler(store, told, clock=lambda: wall[0])
    mono = time.monotonic()
    agents.nodes["n1"] = Node("n1", Register("n1", "gpu-1", "1.0"), lost_at=mono - 10)
    reconciler.replicas["r1"] = Replica("r1", "qwen", "n1", state="ready")

    reconciler._tell_lost(mono)
    assert told == []  # a link that drops for a moment is no news
    reconciler._tell_lost(mono + 25)
    reconciler._tell_lost(mono + 60)
    assert [(e.kind, e.fields["node"], e.fields["replicas"]) for e in told] == [("node_lost", "gpu-1", ["r1"])]

    agents.nodes["n1"].lost_at = None  # connected again, then lost again
    reconciler._tell_lost(mono + 61)
    agents.nodes["n1"].lost_at = mono + 62
    reconciler._tell_lost(mono + 100)
    assert len(told) == 1  # a node that flaps is told once an hour
    wall[0] += 3600
    agents.nodes["n1"].lost_at = None
    reconciler._tell_lost(mono + 101)
    agents.nodes["n1"].lost_at = mono + 102
    reconciler._tell_lost(mono + 140)
    assert [(e.kind, e.held_back) for e in told] == [("node_lost", 0), ("node_lost", 1)]
