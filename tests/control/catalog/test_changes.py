"""The administrator's changes to a served model: scale, resources, context, cards — and their refusals, in figures."""

from __future__ import annotations

import pytest
from cluster_helpers import NOW, model, node

from llmgw.control.catalog import changes
from llmgw.control.catalog.changes import Refusal
from llmgw.store import Replica

KV = 128 * 1024  # bytes a token: a 7B-ish model at f16
RTX = ("Quadro RTX 6000", 24, "7.5")
H100 = ("NVIDIA H100 80GB HBM3", 80, "9.0")


def refused(call, *args, **kw) -> str:
    with pytest.raises(Refusal) as e:
        call(*args, **kw)
    return str(e.value)


def test_scale_sets_min_and_max_and_a_stopped_model_starts_at_that_number():
    spec = model(min=1, max=2, stopped=True).spec
    new, notes = changes.scale(spec, 3, 5)
    assert (new.scaling.min, new.scaling.max, new.stopped) == (3, 5, False)
    assert notes == ["qwen was stopped; it starts again at this number"]


def test_raising_min_past_max_raises_max_with_it_and_a_max_below_min_is_refused():
    spec = model(min=1, max=2).spec
    assert changes.scale(spec, 4, None)[0].scaling.max == 4
    assert refused(changes.scale, spec, 3, 2) == "--max 2 is fewer than --min 3"


def test_resources_change_every_profile_or_the_one_named():
    m = model(profiles=[{"engine": "vllm", "gpus": {"count": 1}}, {"engine": "llamacpp", "memory": "4GB"}])
    new, _ = changes.resources(m.spec, 6, "12GB", "llamacpp", [])
    assert (new.profiles[1].cpu_cores, int(new.profiles[1].memory)) == (6, 12 * 1024**3)
    assert new.profiles[0].cpu_cores == 0
    assert refused(changes.resources, m.spec, 1, None, "trtllm", []) == (
        "qwen has no profile trtllm; its profiles are 0 (vllm), 1 (llamacpp)")


def test_resources_no_node_could_hold_are_refused_with_the_largest():
    said = refused(changes.resources, model().spec, None, "64GB", None, [node("a", memory_gb=32)])
    assert said == ("these resources fit no node: profile 0 (llamacpp) needs 64.0 GB and the largest node it may "
                    "run on (a) has 32.0 GB")


def test_a_longer_context_grows_the_memory_its_kv_cache_takes():
    spec = model(memory="6GB", context_length=4096, slots=2, kv_bytes_per_token=KV).spec
    new, notes = changes.context(spec, 8192, None, None, [node("a", memory_gb=32)])
    # 2 slots × 4096 more tokens × 128 KB = 1 GB more.
    assert (new.context_length, int(new.profiles[0].memory)) == (8192, 7 * 1024**3)
    assert notes[-1] == "KV cache: 1.0 GB → 2.0 GB (2 × 8192 tokens × 131072 bytes)"


def test_a_context_the_memory_cannot_hold_is_refused_with_the_longest_that_fits():
    spec = model(memory="6GB", context_length=4096, slots=1, kv_bytes_per_token=KV).spec
    said = refused(changes.context, spec, 131072, None, None, [node("a", memory_gb=16), node("b", memory_gb=12)])
    # 6 GB less the 0.5 GB of cache is 5.5 GB of the rest; 16 GB leaves 10.5 GB = 86016 tokens.
    assert said == ("a 131072-token context (1 slot) takes 16.0 GB of KV cache, so a replica of profile 0 needs "
                    "21.5 GB, and a has 16.0 GB; the longest that fits is 86016 tokens")


def test_a_context_on_cards_is_checked_against_the_largest_card():
    spec = model(engine="vllm", memory="2GB", gpus={"count": 1, "memory": "20GB"}, context_length=8192,
                 kv_bytes_per_token=KV).spec
    said = refused(changes.context, spec, 65536, None, None, [node("g", gpus=[RTX])])
    assert said.startswith("a 65536-token context (1 slot) takes 8.0 GB of KV cache, so each card of profile 0 "
                           "needs 27.0 GB, and g's GPU 0 (rtx6000-24g) has 24.0 GB; the longest that fits is ")


def test_a_context_longer_than_the_training_is_refused():
    spec = model(context_length=4096, trained_context=32768).spec
    assert refused(changes.context, spec, 65536, None, None, []) == (
        "a 65536-token context is longer than qwen was trained for (32768 tokens)")


def test_the_longest_answer_follows_the_context_unless_set_otherwise():
    following = model(context_length=4096, max_output=4096).spec
    assert changes.context(following, 8192, None, None, [])[0].max_output == 8192
    own = model(context_length=8192, max_output=1024).spec
    assert changes.context(own, 16384, None, None, [])[0].max_output == 1024
    shrunk, notes = changes.context(model(context_length=8192, max_output=4096).spec, 2048, None, None, [])
    assert shrunk.max_output == 2048 and "more than the new context" in notes[0]


def test_the_longest_answer_alone_restarts_nothing():
    spec = model(context_length=8192, max_output=1024).spec
    new, notes = changes.context(spec, None, None, 2048, [])
    assert new.max_output == 2048 and new.profile_hash(0) == spec.profile_hash(0)
    assert notes == ["only the longest answer changed: in force at once, no replica restarts"]
    assert refused(changes.context, spec, None, None, 9000, []) == (
        "--max-output 9000 is more than the context (8192 tokens); an answer must fit in it")


def test_without_its_kv_size_a_context_changes_and_says_the_memory_did_not():
    new, notes = changes.context(model(context_length=4096).spec, 8192, None, None, [])
    assert int(new.profiles[0].memory) == 4 * 1024**3
    assert "kv_bytes_per_token" in notes[0]


def test_more_cards_share_the_memory_and_a_count_no_node_has_is_refused():
    spec = model(engine="vllm", gpus={"count": 1, "memory": "40GB"}).spec
    nodes = [node("g", gpus=[H100, H100]), node("h", gpus=[H100])]
    new, _ = changes.gpus(spec, 2, None, False, nodes, [])
    assert (new.profiles[0].gpus.count, int(new.profiles[0].gpus.memory)) == (2, 20 * 1024**3)
    assert refused(changes.gpus, spec, 4, None, False, nodes, []) == (
        "no node qwen may run on has 4 GPUs: the most on one is 2 (g)")


def test_fewer_cards_that_cannot_hold_the_model_are_refused_with_the_figures():
    spec = model(engine="vllm", gpus={"count": 2, "memory": "20GB"}).spec
    said = refused(changes.gpus, spec, 1, None, False, [node("g", gpus=[RTX, RTX])], [])
    assert said.startswith("on 1 card each would need 40.0 GB for the weights and the context, and the largest "
                           "card (g's GPU 0 (rtx6000-24g)) has 24.0 GB")


def test_a_model_on_cpus_has_no_cards_to_change():
    assert refused(changes.gpus, model().spec, 2, None, False, [], []).startswith("qwen runs on CPUs only")


def test_llamacpp_drops_a_tensor_split_written_for_the_old_cards():
    spec = model(gpus={"count": 2}, profiles=None).spec
    spec.profiles[0].args = ["--tensor-split", "1,1", "--flash-attn"]
    new, notes = changes.gpus(spec, 3, None, False, [], [])
    assert new.profiles[0].args == ["--flash-attn"]
    assert "--tensor-split" in notes[0]


def _running(node_id: str, cards: list[int]) -> Replica:
    return Replica("r1", "qwen", node_id, state="ready", gpus=cards, since=NOW, profile_hash="x")


def test_more_cards_without_room_beside_the_running_replica_are_refused_pointing_at_in_place():
    spec = model(engine="vllm", gpus={"count": 1}).spec
    nodes = [node("g", gpus=[RTX, RTX])]
    said = refused(changes.gpus, spec, 2, None, False, nodes, [_running("id-g", [0])])
    assert "fits beside its running replica on no node (g: needs 2 GPUs whole, 1 free" in said
    assert "--in-place" in said
    new, notes = changes.gpus(spec, 2, None, True, nodes, [_running("id-g", [0])])
    assert new.replace == "in_place" and new.profiles[0].gpus.count == 2
    assert "the model does not answer while one loads" in notes[-1]


def test_in_place_is_refused_where_the_node_lacks_the_cards_even_with_the_replica_stopped():
    spec = model(engine="vllm", gpus={"count": 1}).spec
    nodes = [node("g", gpus=[RTX, RTX])]
    other = Replica("o1", "other", "id-g", state="ready", gpus=[1], since=NOW)
    said = refused(changes.gpus, spec, 2, None, True, nodes, [_running("id-g", [0]), other])
    assert said == ("g does not have the cards free even with qwen's replica r1 stopped: needs 2 GPUs whole, "
                    "1 free: GPU 0 is free; GPU 1 held whole by other/o1")


def test_serve_makes_a_llamacpp_model_from_a_gguf_sized_by_its_file(tmp_path):
    weights = tmp_path / "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"
    weights.write_bytes(b"\0" * (3 * 1024 * 1024))
    spec, notes = changes.serve_spec(str(weights), context=4096)
    assert spec.name == "qwen2.5-0.5b-instruct-q4_k_m"
    assert spec.profiles[0].engine == "llamacpp" and spec.context_length == 4096
    assert int(spec.profiles[0].memory) == 1027 * 1024 * 1024  # the file and a gigabyte
    assert notes[0].startswith("memory kept: 1.0 GB for a 3 MB file")


def test_serve_says_what_it_could_not_tell():
    spec, notes = changes.serve_spec("hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf@main")
    assert spec.name == "qwen2.5-7b-instruct-q4_k_m" and int(spec.profiles[0].memory) == 4 * 1024**3
    assert "the weights' size is not known here" in notes[0]
    assert refused(changes.serve_spec, "hf:Qwen/Qwen2.5-7B-Instruct").startswith("say which engine serves")
    gpu, _ = changes.serve_spec("hf:Qwen/Qwen2.5-7B-Instruct", gpus=2)
    assert (gpu.profiles[0].engine, gpu.profiles[0].gpus.count) == ("vllm", 2)
    sim, _ = changes.serve_spec("sim", name="echo")
    assert (sim.name, sim.source, sim.profiles[0].engine) == ("echo", "", "sim")


def test_serve_refuses_a_pickle():
    assert "pickle format" in refused(changes.serve_spec, "https://example.com/model.pt", engine="vllm")
