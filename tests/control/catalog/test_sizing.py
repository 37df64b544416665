"""A model added without knowing its size keeps, once its node has the file, what the file's length needs.

Issue 11: `build.py run --model hf:…` with the hub's size unknown kept every core of a two-core machine for a
replica, so a small model could not be placed beside it.
"""

from __future__ import annotations

from types import SimpleNamespace

from cluster_helpers import Cluster, model, node

from llmgw.control.agentsvc import AgentService
from llmgw.control.catalog import changes
from llmgw.control.catalog.sizing import from_length
from llmgw.control.reconciler import Reconciler
from llmgw.protocol import ShardStatus
from llmgw.store import Replica

MB = 1024 * 1024
GB = 1024 * MB


def test_a_small_file_keeps_one_core_and_a_gigabyte_beside_itself():
    assert from_length(100 * MB, cores_at_most=4) == (1, 100 + 1024)


def test_a_large_file_keeps_a_core_per_512_mb_up_to_what_the_profile_asked_and_a_quarter_more_memory():
    assert from_length(3 * GB, cores_at_most=4) == (4, 3 * 1024 + 1024)
    assert from_length(3 * GB, cores_at_most=8) == (6, 3 * 1024 + 1024)
    assert from_length(8 * GB, cores_at_most=32) == (16, 10 * 1024)


def test_a_profile_that_keeps_no_cores_still_keeps_none_once_sized():
    assert from_length(3 * GB, cores_at_most=0)[0] == 0


def test_serve_marks_a_model_of_unknown_size_to_be_sized_from_its_weights_and_says_so():
    spec, notes = changes.serve_spec("hf:org/repo/tiny.gguf", cores=2)
    assert spec.profiles[0].size_from_weights
    assert "a core for each 512 MB up to 2" in notes[0]
    given, _ = changes.serve_spec("hf:org/repo/tiny.gguf", cores=2, memory="2GB")
    assert not given.profiles[0].size_from_weights


def test_a_memory_set_by_a_person_is_kept_rather_than_sized_from_the_weights():
    spec, _ = changes.serve_spec("hf:org/repo/tiny.gguf", cores=2)
    changed, _ = changes.resources(spec, None, "6GB", None, [])
    assert not changed.profiles[0].size_from_weights
    cores_only, _ = changes.resources(spec, 1, None, None, [])
    assert cores_only.profiles[0].size_from_weights


def _sized_model(name: str = "big"):
    return model(name, cores=2, memory="4GB", profiles=[{"engine": "llamacpp", "cpu_cores": 2, "memory": "4GB",
                                                         "size_from_weights": True}])


def test_a_replica_sized_from_its_weights_leaves_room_for_a_small_model_beside_it():
    c = Cluster([node("a", cores=2, memory_gb=8)], [_sized_model()])
    c.step()
    (r,) = c.running("big")
    assert r.cpu_cores == 2  # the first guess, while the length is not known
    # What the reconciler does once the node said the file's length.
    c.set(r.id, cpu_cores=1, memory_mb=100 + 1024)
    c.models["tiny"] = model("tiny", engine="sim", cores=1, memory="256MB")
    assert [(s.model, s.node_id) for s in c.step().starts] == [("tiny", "id-a")]


def test_a_model_whose_length_is_known_places_its_next_replica_with_it():
    entry = _sized_model()
    entry.weights_bytes = 100 * MB
    c = Cluster([node("a", cores=2, memory_gb=8)], [entry])
    (start,) = c.step().starts
    assert (start.cpu_cores, start.memory_mb) == (1, 100 + 1024)


async def test_the_length_a_node_reports_resizes_the_replica_it_holds():
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(None, agents, leading=lambda: True, registry=lambda: None)
    entry = _sized_model()
    reconciler.replicas["r_1"] = Replica(id="r_1", model="big", node_id="id-a", state="starting", desired="run",
                                         cpu_cores=2, memory_mb=4096)
    reconciler._heard(SimpleNamespace(id="id-a", name="a"),
                      ShardStatus("r_1", "starting", "big", message="starting the engine", since=2.0,
                                  weights_bytes=100 * MB))
    reconciler._size_from_weights([entry])
    r = reconciler.replicas["r_1"]
    assert (r.cpu_cores, r.memory_mb) == (1, 100 + 1024)
    assert entry.weights_bytes == 100 * MB


async def test_a_model_with_its_size_given_is_not_resized_by_the_length_reported():
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(None, agents, leading=lambda: True, registry=lambda: None)
    reconciler.replicas["r_1"] = Replica(id="r_1", model="qwen", node_id="id-a", state="starting", desired="run",
                                         cpu_cores=2, memory_mb=4096)
    reconciler._heard(SimpleNamespace(id="id-a", name="a"),
                      ShardStatus("r_1", "starting", "qwen", since=2.0, weights_bytes=100 * MB))
    reconciler._size_from_weights([model("qwen", cores=2, memory="4GB")])
    r = reconciler.replicas["r_1"]
    assert (r.cpu_cores, r.memory_mb) == (2, 4096)
