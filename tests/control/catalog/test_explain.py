"""explain-placement: every node considered, and why each was refused, in figures."""

from __future__ import annotations

from cluster_helpers import NOW, model, node

from llmgw.control.catalog import explain
from llmgw.control.catalog.explain import view

RTX = ("Quadro RTX 6000", 24, "7.5")


def test_every_node_is_listed_with_why_it_was_refused():
    nodes = [
        node("fits", memory_gb=64),
        node("small", memory_gb=4),
        node("busy", cores=1),
        node("noengine", engines=("vllm",)),
        node("judge", labels={"llmgw.role": "judge"}),
        node("gone", seen=NOW - 120),
    ]
    e = explain("qwen", [model(memory="8GB")], nodes, [], NOW)
    said = {v.name: (v.fits, v.reasons) for v in e.nodes}
    assert said["fits"] == (True, [])
    assert said["small"] == (False, ["not enough memory: needs 8.0 GB, free 4.0 GB of 4.0 GB"])
    assert said["busy"] == (False, ["not enough cores: needs 2, free 1 of 1"])
    assert said["noengine"] == (False, ["engine llamacpp is not on this node, or is disabled there (it has: vllm)"])
    assert said["judge"] == (False, ["kept for llmgw.role=judge, which this profile does not select"])
    assert said["gone"] == (False, ["lost: no heartbeat for 120 s (a node is lost after 30 s)"])
    assert [v.name for v in e.nodes] == sorted(said)
    assert e.state == "running" and e.wanted == 1
    assert [a.node_id for a in e.actions] == ["id-fits"]


def test_a_label_the_profile_wants_and_the_node_lacks_is_named():
    e = explain("guard", [model("guard", selector={"llmgw.role": "judge"})], [node("plain")], [], NOW)
    assert e.nodes[0].reasons == ["labels: the profile wants llmgw.role=judge, the node has no llmgw.role label"]
    assert e.state == "waiting"
    assert any(n.startswith("fits on no node: plain: labels") for n in e.notes)


def test_cards_held_by_others_are_named_with_what_is_free():
    nodes = [node("g", gpus=[RTX, RTX], foreign=[20 * 1024, 0])]
    m = model(gpus={"count": 2, "memory": "10GB"})
    e = explain("qwen", [m], nodes, [], NOW)
    (reason,) = e.nodes[0].reasons
    assert reason == ("needs 2 GPUs with 10.0 GB free each; it has 1 such of 2 "
                      "(GPU 0 (rtx6000-24g) has 4.0 GB besides 20.0 GB held by other programs)")
    assert "GPU 0 (rtx6000-24g): 4.0 GB" in e.nodes[0].free


def test_cards_taken_by_replicas_are_named_with_their_holders():
    from dataclasses import replace as with_

    from llmgw.store import Replica

    held = Replica("r1", "other", "id-g", state="ready", gpus=[0], gpu_memory_mb=0, since=NOW)
    e = explain("qwen", [model(gpus={"count": 2})], [node("g", gpus=[RTX, RTX])], [held], NOW)
    assert e.nodes[0].reasons == ["needs 2 GPUs whole, 1 free: GPU 0 held whole by other/r1; GPU 1 is free"]
    shared = with_(held, gpu_memory_mb=8 * 1024)
    e = explain("qwen", [model(gpus={"count": 2, "memory": "20GB"})], [node("g", gpus=[RTX, RTX])], [shared], NOW)
    assert e.nodes[0].reasons == ["needs 2 GPUs with 20.0 GB free each, 1 free: "
                                  "GPU 0 has 16.0 GB free, beside other/r1; GPU 1 has 24.0 GB free"]


def test_each_profile_gets_its_own_verdict():
    m = model(profiles=[{"engine": "vllm", "gpus": {"count": 1}}, {"engine": "llamacpp", "memory": "4GB"}])
    e = explain("qwen", [m], [node("cpu")], [], NOW)
    (v,) = e.nodes
    assert [(p.profile, p.fits) for p in v.profiles] == [(0, False), (1, True)]
    assert v.profiles[0].reasons == ["no GPUs; the profile needs 1 GPU whole"]
    assert v.fits


def test_a_stopped_model_says_so_and_a_missing_one_too():
    from dataclasses import replace

    e = explain("qwen", [replace(model(), stopped=True)], [node("a")], [], NOW)
    assert e.state == "stopped" and e.wanted == 0
    assert "stopped by an administrator: `llmgw ctl model start` runs it again" in e.notes
    assert explain("nope", [], [], [], NOW).state == "not in the catalog"


def test_the_explanation_is_plain_json():
    import json

    doc = view(explain("qwen", [model()], [node("a")], [], NOW))
    text = json.dumps(doc)
    assert '"action": "start"' in text and doc["nodes"][0]["reasons"] == []
