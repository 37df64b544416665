"""`ctl restart --model M` in the catalog: the model's restart count raised, audited, and what placement makes of it."""

from __future__ import annotations

import pytest
from cluster_helpers import NOW, node

from llmgw.account.service import Actor
from llmgw.control.catalog import Entry, place
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.service import Catalog
from llmgw.store import AuditEntry, Replica

ALICE = Actor("alice", "cli")
DOC = {"name": "qwen", "aliases": ["qwen-chat"], "source": "/models/qwen.gguf",
       "profiles": [{"engine": "llamacpp", "cpu_cores": 2, "memory": "4GB"}], "scaling": {"min": 2}}


@pytest.fixture
def catalog(store):
    async def audit(actor, action, target, before, after):
        await store.add_audit(AuditEntry(NOW, actor.name, actor.via, action, target, before, after))

    return Catalog(store, audit, clock=lambda: NOW)


async def _running(store, entry: Entry, *ids: str) -> None:
    digest = entry.spec.profile_hash(0, entry.restarts)
    await store.put_replicas([Replica(i, "qwen", f"id-n{k}", state="ready", since=NOW, created_at=NOW + k,
                                      profile_hash=digest) for k, i in enumerate(ids)])


async def test_a_restart_raises_the_models_restarts_audited_and_says_what_will_happen(catalog, store):
    await catalog.add(ALICE, DOC)
    await _running(store, Entry.from_record(await store.get_model("qwen")), "r1", "r2")
    answer = await catalog.restart(ALICE, "qwen-chat")
    assert answer["replicas"] == 2
    assert answer["notes"][0] == ("its 2 replicas are replaced one at a time: each new one starts beside the old, "
                                  "which stops once the new one is ready, so the model keeps answering")
    record = await store.get_model("qwen")
    assert (record.restarts, record.version, record.updated_by) == (1, 2, "alice")
    entry = (await store.list_audit())[0]
    assert (entry.action, entry.target, entry.before, entry.after) == ("model.restart", "model:qwen",
                                                                       {"restarts": 0}, {"restarts": 1})


async def test_after_a_restart_placement_replaces_one_replica_at_a_time_beside_the_old(catalog, store):
    await catalog.add(ALICE, DOC)
    await _running(store, Entry.from_record(await store.get_model("qwen")), "r1", "r2")
    await catalog.restart(ALICE, "qwen")
    entry = Entry.from_record(await store.get_model("qwen"))
    plan = place([entry], [node("n0"), node("n1")], await store.list_replicas(), NOW + 10)
    (start,) = plan.starts
    assert start.replaces == "r1" and not plan.stops  # the oldest first; it stops once its replacement is ready


async def test_a_stopped_or_unknown_model_is_not_restarted(catalog, store):
    await catalog.add(ALICE, {**DOC, "name": "idle", "aliases": []})
    await catalog.stop(ALICE, "idle")
    with pytest.raises(Refusal) as e:
        await catalog.restart(ALICE, "idle")
    assert (str(e.value), e.value.status) == (
        "idle is stopped: it has no replica to restart (llmgw ctl model start idle runs it again)", 409)
    with pytest.raises(Refusal) as e:
        await catalog.restart(ALICE, "llama")
    assert (str(e.value), e.value.status) == ("the catalog has no model named llama (the models: idle)", 404)
    assert (await store.get_model("idle")).restarts == 0


async def test_a_model_with_nothing_running_has_nothing_to_restart_and_is_not_changed(catalog, store):
    await catalog.add(ALICE, DOC)
    answer = await catalog.restart(ALICE, "qwen")
    assert answer["replicas"] == 0
    assert answer["notes"] == ["none of qwen's replicas runs now: nothing to restart (the next one placed starts "
                               "afresh)"]
    assert (await store.get_model("qwen")).version == 1
    assert [e.action for e in await store.list_audit()] == ["model.add"]


async def test_a_restart_tries_a_parked_replicas_weights_again_and_says_so(catalog, store):
    await catalog.add(ALICE, {**DOC, "scaling": {"min": 1}})
    entry = Entry.from_record(await store.get_model("qwen"))
    await store.put_replicas([Replica("r1", "qwen", "id-n0", state="parked", since=NOW - 60, created_at=NOW - 60,
                                      profile_hash=entry.spec.profile_hash(0, 0),
                                      message="parked: its weights could not be had: unreachable")])
    assert (await catalog.list_models())[0]["state"] == "parked"
    answer = await catalog.restart(ALICE, "qwen")
    assert answer["replicas"] == 1
    assert answer["notes"][0].startswith("its parked replica is given up and a new one fetches the weights again")
    plan = place([Entry.from_record(await store.get_model("qwen"))], [node("n0")], await store.list_replicas(), NOW)
    assert [s.shard_id for s in plan.stops] == ["r1"] and len(plan.starts) == 1
