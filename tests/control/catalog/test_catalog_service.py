"""The catalog over a real store (both dialects): changes written on the version read, audited, refused in sentences."""

from __future__ import annotations

import dataclasses

import pytest
from cluster_helpers import NOW

from llmgw.account.service import Actor
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.service import Catalog
from llmgw.protocol import GPU, Heartbeat, Host, Register, to_dict
from llmgw.store import AuditEntry, NodeRecord, Replica

ALICE = Actor("alice", "cli")
DOC = {"name": "qwen", "aliases": ["qwen-chat"], "source": "/models/qwen.gguf",
       "profiles": [{"engine": "llamacpp", "cpu_cores": 2, "memory": "4GB", "env": {"NCCL_DEBUG": "INFO"}}]}


@pytest.fixture
def catalog(store):
    async def audit(actor, action, target, before, after):
        await store.add_audit(AuditEntry(NOW, actor.name, actor.via, action, target, before, after))

    return Catalog(store, audit, clock=lambda: NOW)


async def add_node(store, name="gpu-1", memory_gb=32, seen=NOW):
    register = Register(node_id=f"id-{name}", name=name, version="1",
                        host=Host(hostname=name, cpu_cores=8, cpu_threads=8, memory_mb=memory_gb * 1024),
                        gpus=[GPU(index=0, name="NVIDIA H100 80GB HBM3", memory_mb=81559, compute_capability="9.0")],
                        engines={"llamacpp": "b6000"})
    await store.put_node(NodeRecord(f"id-{name}", name, to_dict(register), heartbeat=to_dict(Heartbeat(at=seen)),
                                    heartbeat_at=seen, first_seen=NOW, updated_at=NOW))


async def test_a_model_added_is_listed_and_audited_without_its_environment_values(catalog, store):
    added = await catalog.add(ALICE, DOC)
    assert added["model"]["state"] == "waiting"
    (listed,) = await catalog.list_models()
    assert (listed["name"], listed["engines"], listed["aliases"]) == ("qwen", ["llamacpp"], ["qwen-chat"])
    assert listed["spec"]["profiles"][0]["env"] == {"NCCL_DEBUG": "…"}
    (entry,) = await store.list_audit()
    assert (entry.action, entry.target, entry.actor, entry.before) == ("model.add", "model:qwen", "alice", None)
    assert "INFO" not in str(entry.after)


async def test_a_name_or_alias_already_in_the_catalog_is_refused(catalog):
    await catalog.add(ALICE, DOC)
    with pytest.raises(Refusal) as e:
        await catalog.add(ALICE, {**DOC, "name": "other", "aliases": ["qwen-chat"]})
    assert (str(e.value), e.value.status) == ("qwen-chat is already an alias of qwen in the catalog", 409)


async def test_a_bad_model_is_refused_naming_the_key(catalog):
    with pytest.raises(Refusal) as e:
        await catalog.add(ALICE, {**DOC, "scaling": {"mni": 1}})
    assert str(e.value) == "scaling.mni: unknown key; did you mean scaling.min?"
    assert e.value.status == 400


async def test_a_model_is_found_by_its_alias_and_a_missing_one_is_named(catalog):
    await catalog.add(ALICE, DOC)
    assert (await catalog.show("qwen-chat"))["name"] == "qwen"
    with pytest.raises(Refusal) as e:
        await catalog.show("llama")
    assert (str(e.value), e.value.status) == ("the catalog has no model named llama (the models: qwen)", 404)


async def test_stop_start_and_scale_are_written_on_new_versions_and_audited(catalog, store):
    await catalog.add(ALICE, DOC)
    stopped = await catalog.stop(ALICE, "qwen")
    assert (stopped["model"]["state"], stopped["model"]["version"]) == ("stopped", 2)
    again = await catalog.stop(ALICE, "qwen")
    assert again["notes"] == ["qwen was already stopped"] and again["model"]["version"] == 2
    scaled = await catalog.scale(ALICE, "qwen", 2, 3)
    assert scaled["model"]["scaling"] == {"min": 2, "max": 3, "on_demand": False}
    assert scaled["model"]["state"] == "waiting"  # scaling a stopped model starts it
    actions = [e.action for e in await store.list_audit()]
    assert actions == ["model.scale", "model.stop", "model.add"]


async def test_a_change_read_before_another_lands_on_the_newer_version(catalog, store):
    await catalog.add(ALICE, DOC)
    record = await store.get_model("qwen")
    await store.put_model(dataclasses.replace(record, updated_by="bob"), record.version)
    done = await catalog.resources(ALICE, "qwen", 4, "6GB")
    assert done["model"]["version"] == 3
    assert (await store.get_model("qwen")).spec["profiles"][0]["cpu_cores"] == 4


async def test_a_model_with_nothing_running_is_removed_at_once_and_one_with_replicas_once_they_stop(catalog, store):
    await catalog.add(ALICE, DOC)
    await catalog.add(ALICE, {**DOC, "name": "busy", "aliases": []})
    done = await catalog.remove(ALICE, "qwen")
    assert await store.get_model("qwen") is None and "its files stay on the nodes" in done["notes"][0]
    await store.put_replicas([Replica("r1", "busy", "id-gpu-1", state="ready", since=NOW)])
    done = await catalog.remove(ALICE, "busy", purge=True)
    record = await store.get_model("busy")
    assert record.removed_at == NOW and record.purge
    assert done["notes"][0] == "its 1 replica stop, then it leaves the catalog"
    assert (await catalog.list_models())[0]["state"] == "removing"
    with pytest.raises(Refusal, match="busy is being removed"):
        await catalog.add(ALICE, {**DOC, "name": "busy", "aliases": []})


async def test_nodes_show_what_they_have_and_what_is_free(catalog, store):
    await add_node(store)
    await add_node(store, "old", seen=NOW - 300)
    await store.put_replicas([Replica("r1", "qwen", "id-gpu-1", state="ready", since=NOW, cpu_cores=2,
                                      memory_mb=4096, gpus=[0])])
    nodes = {n["name"]: n for n in await catalog.nodes()}
    gpu = nodes["gpu-1"]
    assert (gpu["state"], gpu["cores"], gpu["free"], gpu["replicas"]) == (
        "ready", 8, {"cores": 6, "memory_mb": 28 * 1024}, 1)
    assert gpu["gpus"][0]["class"] == "h100-80g" and gpu["gpus"][0]["free_mb"] == 0
    assert nodes["old"]["state"] == "lost"
    shown = await catalog.node("gpu-1")
    assert [r["id"] for r in shown["replica_list"]] == ["r1"]
    with pytest.raises(Refusal, match="there is no node nope"):
        await catalog.node("nope")
    assert [r["node"] for r in await catalog.replicas(node="gpu-1")] == ["gpu-1"]


async def test_explain_reads_the_stored_cluster(catalog, store):
    await add_node(store, memory_gb=2)
    await catalog.add(ALICE, DOC)
    e = await catalog.explain("qwen")
    assert e["state"] == "waiting"
    assert e["nodes"][0]["reasons"] == ["not enough memory: needs 4.0 GB, free 2.0 GB of 2.0 GB"]


async def test_a_context_the_cards_cannot_hold_is_refused_and_nothing_is_written(catalog, store):
    await add_node(store, memory_gb=16)
    await catalog.add(ALICE, {**DOC, "context_length": 4096, "kv_bytes_per_token": 131072})
    with pytest.raises(Refusal, match="the longest that fits is"):
        await catalog.context(ALICE, "qwen", 200000)
    assert (await store.get_model("qwen")).version == 1


async def test_a_profile_its_engine_would_refuse_on_a_node_is_refused_when_added(catalog):
    doc = {**DOC, "profiles": [{"engine": "vllm", "gpus": {"count": 1}, "args": ["--trust-remote-code"]}],
           "source": "hf:Qwen/Qwen2.5-7B-Instruct"}
    with pytest.raises(Refusal) as e:
        await catalog.add(ALICE, doc)
    assert str(e.value).startswith("profiles[0].args[0]: ")
    assert e.value.status == 400
