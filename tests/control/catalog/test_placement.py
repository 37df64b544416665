"""Placement: where replicas go, what replaces what, and when a model waits — one pure pass at a time."""

from __future__ import annotations

from dataclasses import replace

from cluster_helpers import NOW, Cluster, model, node

from llmgw.control.catalog import Policy, place
from llmgw.control.catalog.plan import Forget, Lost, Purge, Start, Stop, Wait

H100 = ("NVIDIA H100 80GB HBM3", 80, "9.0")
A100 = ("NVIDIA A100-SXM4-40GB", 40, "8.0")
RTX = ("Quadro RTX 6000", 24, "7.5")


def test_a_replica_goes_where_its_memory_fits_and_nowhere_else():
    c = Cluster([node("small", memory_gb=4), node("big", memory_gb=64)], [model(memory="8GB")])
    plan = c.step()
    assert [(s.node_id, s.memory_mb) for s in plan.starts] == [("id-big", 8192)]
    assert plan.starts[0].profile.memory_mb == 8192


def test_cores_already_held_by_other_replicas_are_not_handed_out_twice():
    c = Cluster([node("a", cores=4, memory_gb=64)], [model("one", cores=3), model("two", cores=2)])
    plan = c.step()
    assert [s.model for s in plan.starts] == ["one"]
    (wait,) = plan.waits
    assert wait.model == "two"
    assert "not enough cores: needs 2, free 1 of 4" in wait.reason


def test_a_model_with_no_node_that_fits_waits_saying_why_in_figures():
    c = Cluster([node("a", memory_gb=16)], [model(memory="20GB")])
    (wait,) = c.step().waits
    assert wait.reason == "fits on no node: a: not enough memory: needs 20.0 GB, free 16.0 GB of 16.0 GB"


def test_replicas_of_a_model_are_spread_over_nodes():
    c = Cluster([node(n, memory_gb=64) for n in "abc"], [model(min=3)])
    c.step()
    assert c.where("qwen") == ["a", "b", "c"]


def test_a_fourth_replica_on_three_nodes_goes_where_most_memory_is_left():
    c = Cluster([node("a", memory_gb=64), node("b", memory_gb=32), node("c", memory_gb=48)],
                [model(min=4, memory="4GB")])
    c.step()
    assert c.where("qwen") == ["a", "a", "b", "c"]


def test_cards_are_chosen_by_class_count_and_memory_left_by_other_programs():
    nodes = [
        node("rtx", gpus=[RTX, RTX]),
        node("a100", gpus=[A100, A100], foreign=[30 * 1024, 0]),
        node("h100", gpus=[H100]),
    ]
    m = model(gpus={"count": 2, "classes": ["a100", "rtx6000"], "memory": "20GB"})
    c = Cluster(nodes, [m])
    plan = c.step()
    (start,) = plan.starts
    # a100's first card has 10 GB left beside another program: only the RTX node has two with 20 GB.
    assert (start.node_id, start.gpus, start.gpu_memory_mb) == ("id-rtx", (0, 1), 20480)
    assert start.profile.gpus == [0, 1]


def test_a_card_too_old_for_the_weights_format_is_refused_naming_its_capability():
    c = Cluster([node("old", gpus=[RTX])], [model(gpus={"count": 1, "min_compute_capability": "8.9"})])
    (wait,) = c.step().waits
    assert "GPU 0 (rtx6000-24g) is compute capability 7.5" in wait.reason


def test_two_models_share_a_card_by_memory_but_a_whole_card_is_shared_with_none():
    c = Cluster([node("g", gpus=[H100])], [
        model("a", gpus={"count": 1, "memory": "30GB"}),
        model("b", gpus={"count": 1, "memory": "30GB"}),
        model("c", gpus={"count": 1}),
    ])
    plan = c.step()
    assert sorted(s.model for s in plan.starts) == ["a", "b"]
    (wait,) = plan.waits
    assert wait.model == "c"
    assert "GPU 0 shared with" in wait.reason


def test_a_profile_selecting_the_judge_role_goes_only_to_judge_nodes_and_others_stay_off_them():
    c = Cluster([node("judge", labels={"llmgw.role": "judge"}), node("worker")],
                [model("guard", selector={"llmgw.role": "judge"}, min=1), model("chat", min=2)])
    c.step()
    assert c.where("guard") == ["judge"]
    assert c.where("chat") == ["worker", "worker"]


def test_a_node_without_the_engine_is_passed_over():
    c = Cluster([node("cpu", engines=("llamacpp",)), node("gpu", engines=("vllm",), gpus=[H100])],
                [model(engine="vllm", gpus={"count": 1})])
    (start,) = c.step().starts
    assert start.node_id == "id-gpu"


def test_profiles_are_tried_in_order_cards_first_then_cpus():
    m = model(profiles=[{"engine": "llamacpp", "memory": "2GB", "gpus": {"count": 1}},
                        {"engine": "llamacpp", "memory": "8GB", "cpu_cores": 4}])
    c = Cluster([node("cpu-only")], [m])
    (start,) = c.step().starts
    assert start.profile_index == 1
    c2 = Cluster([node("cpu-only"), node("gpu", gpus=[RTX])], [m])
    (start,) = c2.step().starts
    assert (start.node_id, start.profile_index) == ("id-gpu", 0)


def test_replicas_on_a_lost_node_are_failed_and_placed_elsewhere_in_the_same_plan():
    c = Cluster([node("a"), node("b", memory_gb=16)], [model(min=1)])
    c.step()
    (first,) = c.running()
    lost = c.nodes[first.node_id]
    other = next(n for n in c.nodes.values() if n.id != lost.id)
    c.silent.add(lost.id)
    c.now += 31
    plan = c.step()
    (gone,) = plan.lost
    assert gone.shard_id == first.id
    assert "no heartbeat for 31 s (a node is lost after 30 s)" in gone.reason
    (start,) = plan.starts
    assert start.node_id == other.id


def test_a_node_heard_from_within_the_timeout_is_not_lost():
    c = Cluster([node("a", seen=NOW - 29)], [model()])
    c.silent.add("id-a")
    assert len(c.step().starts) == 1


def test_a_changed_model_is_replaced_beside_the_old_replica_which_stops_once_the_new_is_ready():
    c = Cluster([node("a", memory_gb=64)], [model(context_length=4096)])
    c.step()
    (old,) = c.running()
    c.change("qwen", context_length=8192)
    plan = c.step(ready=False)
    (start,) = plan.starts
    assert start.replaces == old.id and plan.stops == []
    assert start.profile.context_length == 8192
    assert c.step().stops == []  # the new one is still starting: the old one serves
    c.set(start.shard_id, state="ready")
    (stop,) = c.step().stops
    assert stop.shard_id == old.id
    assert stop.reason == f"replaced by {start.shard_id}, which is ready"
    assert [r.id for r in c.running()] == [start.shard_id]


def test_a_new_longest_answer_restarts_nothing():
    c = Cluster([node("a")], [model(context_length=4096, max_output=512)])
    c.step()
    c.change("qwen", max_output=1024)
    assert c.step().actions == []


def test_changed_replicas_are_replaced_one_at_a_time():
    c = Cluster([node(n, memory_gb=64) for n in "abc"], [model(min=3, context_length=4096)])
    c.step()
    c.change("qwen", context_length=8192)
    first = c.step(ready=False)
    assert len(first.starts) == 1
    assert c.step(ready=False).starts == []  # waits for the first to be ready
    c.set(first.starts[0].shard_id, state="ready")
    second = c.step(ready=False)
    assert len(second.stops) == 1 and len(second.starts) == 1


def test_without_room_beside_it_a_replacement_waits_and_says_in_place_would_do():
    c = Cluster([node("a", memory_gb=10)], [model(memory="6GB", context_length=4096)])
    c.step()
    c.change("qwen", context_length=8192)
    plan = c.step()
    assert plan.starts == [] and plan.stops == []
    (wait,) = plan.waits
    assert "no room beside" in wait.reason and "--in-place" in wait.reason


def test_in_place_stops_the_old_replica_first_and_starts_the_new_on_its_room():
    c = Cluster([node("a", memory_gb=10)], [model(memory="6GB", context_length=4096, replace="in_place")])
    c.step()
    (old,) = c.running()
    c.change("qwen", context_length=8192)
    (stop,) = c.step().stops
    assert stop.shard_id == old.id
    (start,) = c.step().starts
    assert start.node_id == old.node_id and start.profile.context_length == 8192


def test_a_restart_waits_for_room_another_restart_will_give_back():
    # The 4-core machine: the judge's new replica needs the cores the
    # starter's old replica holds while the starter restarts too.
    c = Cluster([node("vm", cores=4, memory_gb=64)],
                [model("judge", cores=2, context_length=1024), model("starter", cores=2, context_length=1024)])
    c.step()
    c.change("judge", context_length=2048)
    c.change("starter", context_length=2048, profiles=[{"engine": "llamacpp", "cpu_cores": 1, "memory": "4GB"}])
    starter_old = next(r for r in c.running("starter"))
    c.set(starter_old.id, desired="stop", state="draining")  # its restart has begun: it is giving back
    plan = c.step()
    waits = [w for w in plan.waits if w.model == "judge"]
    assert waits and "waits for room other restarts are giving back" in waits[0].reason


def test_scaling_up_and_down_starts_and_stops_the_difference():
    c = Cluster([node(n, memory_gb=64) for n in "ab"], [model(min=1, max=4)])
    c.step()
    c.change("qwen", scaling={"min": 3, "max": 4})
    assert len(c.step().starts) == 2
    c.change("qwen", scaling={"min": 1, "max": 1})
    stops = c.step().stops
    assert len(stops) == 2 and all(s.reason == "scaled to 1" for s in stops)
    assert len(c.running()) == 1


def test_load_wanted_is_kept_between_min_and_max():
    c = Cluster([node(n, memory_gb=64) for n in "abc"], [model(min=1, max=2)])
    c.demand.wanted["qwen"] = 5
    assert len(c.step().starts) == 2


def test_a_failed_replica_is_replaced_only_after_the_retry_wait():
    c = Cluster([node("a")], [model()], policy=Policy(retry_after=30))
    c.step()
    (r,) = c.running()
    c.set(r.id, state="failed", since=c.now, message="exit 1")
    c.now += 10
    assert c.step().actions == []
    c.now += 25
    plan = c.step()
    assert [s.shard_id for s in plan.stops] == [r.id]
    assert "exit 1" in plan.stops[0].reason
    assert len(plan.starts) == 1


def test_a_stopped_model_stops_its_replicas_and_starts_none():
    c = Cluster([node("a")], [model(min=2)])
    c.step()
    c.models["qwen"] = replace(c.models["qwen"], stopped=True)
    plan = c.step()
    assert len(plan.stops) == 2 and plan.starts == []
    assert plan.stops[0].reason == "stopped by an administrator"
    assert c.step().actions == []


def test_a_model_removed_with_purge_is_forgotten_and_its_weights_removed_once_its_replicas_stop():
    c = Cluster([node("a"), node("b")], [model("old"), model("kept", source="/models/shared.gguf")])
    c.step()
    c.models["old"] = replace(c.models["old"], removed=True, purge=True)
    first = c.plan()
    assert [s.model for s in first.stops] == ["old"] and first.of(Forget) == []
    (stop,) = first.stops
    c.set(stop.shard_id, desired="stop", state="draining")
    assert c.plan().of(Forget) == []  # still draining: its files are in use
    c.set(stop.shard_id, state="stopped")
    plan = c.step()
    assert plan.of(Forget) == [Forget("old")]
    assert sorted(p.node_id for p in plan.of(Purge)) == ["id-a", "id-b"]
    assert plan.of(Purge)[0].sources == ("/models/old.gguf",)


def test_weights_another_model_uses_are_not_purged():
    c = Cluster([node("a")], [model("old", source="/models/same.gguf"), model("kept", source="/models/same.gguf")])
    c.models["old"] = replace(c.models["old"], removed=True, purge=True)
    plan = c.plan()
    assert plan.of(Forget) == [Forget("old")] and plan.of(Purge) == []


def test_replicas_of_a_model_no_longer_in_the_catalog_are_stopped():
    c = Cluster([node("a")], [model("gone")])
    c.step()
    del c.models["gone"]
    (stop,) = c.step().stops
    assert stop.reason == "its model is no longer in the catalog"


# --- on demand ---------------------------------------------------------------------------------

def _on_demand_pair():
    gpu = {"count": 1}
    return Cluster([node("g", gpus=[RTX])], [
        model("picture", gpus=gpu, min=0, on_demand={"evict_after_idle": "2m", "min_lifetime": "5m"}),
        model("mesh", gpus=gpu, min=0, on_demand={"evict_after_idle": "2m", "min_lifetime": "5m"}),
    ])


def test_an_on_demand_model_is_not_loaded_until_asked_for():
    c = _on_demand_pair()
    assert c.step().actions == []
    c.demand.asked["picture"] = c.now
    (start,) = c.step().starts
    assert start.model == "picture"
    del c.demand.asked["picture"]
    assert c.step().actions == []  # loaded, it stays loaded


def test_an_idle_on_demand_replica_gives_way_only_after_evict_after_idle_and_min_lifetime():
    c = _on_demand_pair()
    c.demand.asked["picture"] = c.now
    c.step()
    (picture,) = c.running("picture")
    del c.demand.asked["picture"]
    c.demand.last_used["picture"] = c.now + 200  # last asked 200 s after it loaded

    c.now += 260  # idle 1 min: too soon
    c.demand.asked["mesh"] = c.now
    (wait,) = c.step().waits
    assert wait.reason == ("the room it needs is held by on-demand picture (picture-1) on g, "
                           "idle 1m00s of its 2m00s")

    c.now += 70  # idle 2m10s and up 5m30s: it may go
    plan = c.step()
    (stop,) = plan.stops
    assert stop.shard_id == picture.id and stop.reason == "evicted after 2m10s idle, for mesh"
    assert "waiting for picture (picture-1) to give back room on g" in plan.waits[0].reason
    (start,) = c.step().starts
    assert start.model == "mesh"


def test_a_just_loaded_on_demand_replica_is_kept_for_its_min_lifetime_however_idle():
    c = _on_demand_pair()
    c.demand.asked["picture"] = c.now
    c.step()
    del c.demand.asked["picture"]
    c.now += 180  # idle 3 min, up 3 min of 5
    c.demand.asked["mesh"] = c.now
    plan = c.step()
    assert plan.stops == []
    assert "up 3m00s of its 5m00s min_lifetime" in plan.waits[0].reason


def test_a_model_that_must_run_evicts_an_idle_on_demand_one():
    c = Cluster([node("g", gpus=[RTX])], [
        model("picture", gpus={"count": 1}, min=0, on_demand={"evict_after_idle": "1m", "min_lifetime": "1m"}),
    ])
    c.demand.asked["picture"] = c.now
    c.step()
    del c.demand.asked["picture"]
    c.now += 120
    c.models["chat"] = model("chat", gpus={"count": 1})
    plan = c.step()
    assert [s.model for s in plan.stops] == ["picture"]


def test_a_pass_in_steady_state_does_nothing():
    c = Cluster([node(n, memory_gb=64) for n in "abcd"], [model(f"m{i}", min=2) for i in range(5)])
    c.step()
    assert c.step().actions == []


def test_shard_ids_come_from_the_given_maker_and_a_start_carries_its_row():
    plan = place([model()], [node("a")], [], NOW, new_id=lambda m: "fixed")
    (start,) = plan.starts
    row = start.replica(NOW)
    assert (row.id, row.state, row.desired, row.memory_mb, row.cpu_cores) == ("fixed", "pending", "run", 4096, 2)
    assert start.message().shard_id == "fixed"
    assert [type(a) for a in plan.ordered()] == [Start]
    assert not any(isinstance(a, (Stop, Lost, Wait)) for a in plan.actions)
