"""A replica whose weights could not be had is parked: it is not started again and again, and holds no room.

Issue 11: with hf: unreachable, a model was restarted without end, each try holding both of the node's cores
while it fetched, so a second model could not be placed beside it.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from cluster_helpers import Cluster, model, node

from llmgw.control.agentsvc import AgentService
from llmgw.control.catalog import Policy
from llmgw.control.reconciler import Reconciler
from llmgw.protocol import ShardStatus
from llmgw.store import Replica

WHY = ("hf:org/repo/big.gguf could not be fetched: 6 tries in a row brought nothing more "
       "(Cannot connect to host). Is the server reachable from this node?")


def _parked_cluster() -> tuple[Cluster, Replica]:
    c = Cluster([node("a", cores=2, memory_gb=8)], [model("big", cores=2, memory="4GB")], policy=Policy(retry_after=30))
    c.step(ready=False)
    (r,) = c.running("big")
    c.set(r.id, state="parked", since=c.now, message=f"parked: its weights could not be had: {WHY}")
    return c, r


def test_a_parked_replica_is_not_replaced_however_long_it_waits_and_says_why_its_model_waits():
    c, r = _parked_cluster()
    c.now += 3600  # far past the retry wait that replaces a failed replica
    plan = c.step()
    assert plan.starts == [] and plan.stops == []
    (wait,) = plan.waits
    assert wait.model == "big" and "could not be fetched" in wait.reason


def test_a_parked_replica_holds_no_cores_so_another_model_is_placed_beside_it():
    c, r = _parked_cluster()
    c.models["tiny"] = model("tiny", engine="sim", cores=1, memory="256MB")
    plan = c.step()
    assert [(s.model, s.node_id) for s in plan.starts] == [("tiny", "id-a")]


def test_a_restart_of_a_parked_model_gives_up_the_parked_replica_and_fetches_again():
    c, r = _parked_cluster()
    c.models["big"] = replace(c.models["big"], restarts=1)
    c.now += 31
    plan = c.step()
    assert [s.shard_id for s in plan.stops] == [r.id]
    assert [s.model for s in plan.starts] == ["big"]


def test_removing_a_parked_model_forgets_it():
    c, r = _parked_cluster()
    c.models["big"] = replace(c.models["big"], removed=True)
    assert [s.shard_id for s in c.step().stops] == [r.id]
    c.step()
    assert c.forgotten == ["big"]


async def test_a_start_that_failed_for_its_weights_is_parked_with_the_reason_and_how_to_retry_or_remove():
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(None, agents, leading=lambda: True, registry=lambda: None)
    r = Replica(id="r_1", model="big", node_id="id-a", state="starting", desired="run", since=1.0)
    reconciler.replicas[r.id] = r
    a = SimpleNamespace(id="id-a", name="a")
    reconciler._heard(a, ShardStatus("r_1", "failed", "big", message=WHY, since=2.0, cause="weights"))
    parked = reconciler.replicas["r_1"]
    assert parked.state == "parked" and parked.desired == "run"
    assert WHY.rstrip(".") in parked.message
    assert "llmgw ctl restart --model big" in parked.message and "llmgw ctl model remove big" in parked.message


async def test_an_engine_that_exits_is_failed_as_before_not_parked():
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(None, agents, leading=lambda: True, registry=lambda: None)
    reconciler.replicas["r_1"] = Replica(id="r_1", model="big", node_id="id-a", state="starting", desired="run")
    reconciler._heard(SimpleNamespace(id="id-a", name="a"),
                      ShardStatus("r_1", "failed", "big", message="the engine exited with code 1", since=2.0))
    assert reconciler.replicas["r_1"].state == "failed"
