"""The catalog's tables on both dialects: models with compare-and-set, nodes and their heartbeats, replicas."""

from __future__ import annotations

import pytest

from llmgw.store import CatalogModel, Conflict, NodeRecord, Replica, StoreError

SPEC = {"name": "qwen", "source": "/models/qwen.gguf",
        "profiles": [{"engine": "llamacpp", "memory": "4GB", "gpus": {"count": 1, "classes": ["h100"]}}],
        "scaling": {"min": 1, "max": 2, "on_demand": {"evict_after_idle": "2m"}}}


def a_model(name: str = "qwen", **changes) -> CatalogModel:
    return CatalogModel(name=name, spec={**SPEC, "name": name}, created_at=1800000000.25,
                        updated_at=1800000000.25, updated_by="alice", **changes)


async def test_a_model_added_is_read_back_whole_at_version_one(store):
    added = await store.add_model(a_model())
    assert added.version == 1
    got = await store.get_model("qwen")
    assert got == added
    assert got.spec == {**SPEC, "name": "qwen"}
    assert (got.stopped, got.restarts, got.removed_at, got.purge) == (False, 0, None, False)


async def test_a_name_in_use_is_refused_naming_it(store):
    await store.add_model(a_model())
    with pytest.raises(Conflict, match="the catalog already has a model named qwen"):
        await store.add_model(a_model())


async def test_a_change_lands_only_on_the_version_it_was_read_at(store):
    first = await store.add_model(a_model())
    first.stopped = True
    first.spec = {**first.spec, "stopped": True}
    first.updated_by = "bob"
    changed = await store.put_model(first, expected_version=1)
    assert (changed.version, changed.stopped, changed.updated_by) == (2, True, "bob")
    with pytest.raises(Conflict, match=r"the model qwen was changed by someone else \(now version 2\)"):
        await store.put_model(first, expected_version=1)
    with pytest.raises(StoreError, match="there is no model named ghost"):
        await store.put_model(a_model("ghost"), expected_version=1)


async def test_a_removed_model_is_listed_only_when_asked_for(store):
    await store.add_model(a_model("b"))
    a = await store.add_model(a_model("a"))
    a.removed_at, a.purge = 1800000100.0, True
    await store.put_model(a, expected_version=1)
    assert [m.name for m in await store.list_models()] == ["b"]
    both = await store.list_models(include_removed=True)
    assert [(m.name, m.purge) for m in both] == [("a", True), ("b", False)]
    await store.delete_model("a")
    assert await store.get_model("a") is None


def a_node(node_id: str = "n1", name: str = "gpu-1") -> NodeRecord:
    return NodeRecord(id=node_id, name=name, register={"node_id": node_id, "name": name, "version": "1",
                                                       "engines": {"llamacpp": "b6000"}},
                      labels={"llmgw.role": "judge"}, state="connected", first_seen=1800000000.0,
                      updated_at=1800000000.0)


async def test_a_node_is_kept_with_its_register_and_its_latest_heartbeat(store):
    await store.put_node(a_node())
    await store.put_node(a_node("n2", "cpu-1"))
    await store.put_node_heartbeats([("n1", {"at": 5.0, "cpu_percent": 12.5}, 1800000005.5),
                                     ("n2", {"at": 6.0}, 1800000006.0)])
    got = await store.get_node("n1")
    assert got.register["engines"] == {"llamacpp": "b6000"}
    assert got.labels == {"llmgw.role": "judge"}
    assert (got.heartbeat, got.heartbeat_at) == ({"at": 5.0, "cpu_percent": 12.5}, 1800000005.5)
    assert [n.name for n in await store.list_nodes()] == ["cpu-1", "gpu-1"]


async def test_a_node_registering_again_keeps_when_it_was_first_seen(store):
    await store.put_node(a_node())
    again = a_node()
    again.first_seen, again.updated_at, again.name = 1900000000.0, 1900000000.0, "renamed"
    await store.put_node(again)
    got = await store.get_node("n1")
    assert (got.name, got.first_seen, got.updated_at) == ("renamed", 1800000000.0, 1900000000.0)
    await store.delete_node("n1")
    assert await store.get_node("n1") is None


def a_replica(rid: str, model: str = "qwen", node_id: str = "n1", **changes) -> Replica:
    return Replica(id=rid, model=model, node_id=node_id, state="starting", since=1800000000.5,
                   created_at=1800000000.5, profile_hash="abcd", cpu_cores=2, memory_mb=4096, gpus=[0, 1],
                   gpu_memory_mb=20480, detail={"fetch": {"bytes_done": 10, "bytes_total": 100}}, **changes)


async def test_replicas_are_written_in_one_go_and_read_back_by_model_and_node(store):
    await store.put_replicas([a_replica("r1"), a_replica("r2", node_id="n2", replaces="r1"),
                              a_replica("r3", model="other")])
    assert await store.get_replica("r2") == a_replica("r2", node_id="n2", replaces="r1")
    assert [r.id for r in await store.list_replicas(model="qwen")] == ["r1", "r2"]
    assert [r.id for r in await store.list_replicas(node_id="n1")] == ["r3", "r1"]  # by model, then age
    assert [r.id for r in await store.list_replicas(model="qwen", node_id="n2")] == ["r2"]


async def test_a_replica_put_again_is_replaced_whole(store):
    await store.put_replicas([a_replica("r1")])
    ready = a_replica("r1", url="http://10.0.0.7:8001/v1", message="")
    ready.state, ready.desired, ready.detail = "ready", "stop", {}
    await store.put_replicas([ready])
    got = await store.get_replica("r1")
    assert (got.state, got.desired, got.url, got.detail) == ("ready", "stop", "http://10.0.0.7:8001/v1", {})
    await store.delete_replicas(["r1"])
    assert await store.list_replicas() == []


async def test_a_desired_state_that_is_neither_run_nor_stop_is_refused(store):
    with pytest.raises(StoreError, match='"run" or "stop"'):
        await store.put_replicas([a_replica("r1", desired="later")])
