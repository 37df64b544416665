"""The upgrade's plan: who goes when, and the sentence that says where it stands."""

from __future__ import annotations

from llmgw.control.upgrade import make_plan, rollback_plan, where_it_stands
from llmgw.control.upgrade.plan import current_wave

PLANES = [{"name": "cp-a", "address": "10.0.0.5:7443", "version": "0.1.0"},
          {"name": "cp-b", "address": "10.0.0.6:7443", "version": "0.1.0"},
          {"name": "cp-c", "address": "10.0.0.7:7443", "version": "0.1.0"}]
NODES = [{"id": f"node_{i}", "name": f"gpu-{i}", "version": "0.1.0"} for i in (3, 1, 2, 4, 5)]


def plan(wave_size: int = 2):
    return make_plan(to="0.2.0", sha256="ab" * 32, control_planes=PLANES, leader="cp-a", nodes=NODES,
                     wave_size=wave_size, by="admin")


def test_control_planes_go_one_at_a_time_standbys_first_and_the_leader_last_then_nodes_in_waves():
    doc = plan(wave_size=2)
    waves = [(m["wave"], m["name"]) for m in doc["machines"]]
    assert waves == [(0, "cp-b"), (1, "cp-c"), (2, "cp-a"),
                     (3, "gpu-1"), (3, "gpu-2"), (4, "gpu-3"), (4, "gpu-4"), (5, "gpu-5")]
    assert [m["role"] for m in doc["machines"][:3]] == ["standby", "standby", "leader"]


def test_a_machine_already_on_the_version_is_left_as_it_is():
    nodes = [*NODES[:1], {"id": "node_9", "name": "gpu-9", "version": "0.2.0"}]
    doc = make_plan(to="0.2.0", sha256="", control_planes=PLANES[:1], leader="cp-a", nodes=nodes, wave_size=1,
                    by="admin")
    assert {m["name"]: m["state"] for m in doc["machines"]} == {"cp-a": "pending", "gpu-3": "pending",
                                                               "gpu-9": "unchanged"}


def test_the_wave_acted_on_is_the_first_with_a_machine_not_yet_through():
    doc = plan(wave_size=2)
    for m in doc["machines"][:4]:
        m["state"] = "done"
    assert [m["name"] for m in current_wave(doc)] == ["gpu-1", "gpu-2"]
    doc["machines"][4]["state"] = "done"
    assert [m["name"] for m in current_wave(doc)] == ["gpu-3", "gpu-4"]


def test_where_it_stands_names_which_machines_are_on_which_version():
    doc = plan(wave_size=2)
    doc["machines"][0]["state"] = "done"
    doc["machines"][1]["state"] = "failed"
    assert where_it_stands(doc) == "cp-b on 0.2.0; cp-c, cp-a, gpu-1, gpu-2, gpu-3, gpu-4, gpu-5 on 0.1.0"


def test_a_rollback_takes_back_only_the_machines_touched_nodes_first_and_the_leader_last():
    doc = plan(wave_size=2)
    for m in doc["machines"][:5]:
        m["state"] = "done"
    doc["machines"][5]["state"] = "failed"
    back = rollback_plan(doc, {"0.1.0": "cd" * 32}, "admin")
    assert [(m["name"], m["from"], m["to"]) for m in back["machines"]] == [
        ("gpu-1", "0.2.0", "0.1.0"), ("gpu-2", "0.2.0", "0.1.0"), ("gpu-3", "0.2.0", "0.1.0"),
        ("cp-b", "0.2.0", "0.1.0"), ("cp-c", "0.2.0", "0.1.0"), ("cp-a", "0.2.0", "0.1.0")]
    assert len({m["wave"] for m in back["machines"]}) == 6 and back["rollback"]
