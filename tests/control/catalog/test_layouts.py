"""The ways a cluster could run a model before anything is fetched, judged in figures a person can check."""

from __future__ import annotations

import pytest

from llmgw.control.catalog.cluster import GPUView, NodeView
from llmgw.control.catalog.layouts import GB, ModelShape, card_bandwidth, plan

MIB = 1024 * 1024


def cards(n: int, name: str, cls: str, memory_gb: int, cc: float = 9.0, nvlink: bool = False) -> tuple[GPUView, ...]:
    return tuple(GPUView(i, cls, memory_gb * 1024, 0, cc, name,
                         tuple(j for j in range(n) if j != i) if nvlink else ()) for i in range(n))


def node(name: str, memory_gb: int = 64, gpus: tuple[GPUView, ...] = (), bandwidth: float = 0.0) -> NodeView:
    return NodeView(id=f"id-{name}", name=name, cores=16, memory_mb=memory_gb * 1024, gpus=gpus,
                    mem_bandwidth_gbs=bandwidth)


ADA = cards(1, "NVIDIA RTX 6000 Ada Generation", "rtx6000ada-48g", 48, 8.9)
# Llama-3.1-8B at Q4_K_M: 32 layers, 8 KV heads of 128: 128 KiB a token at f16.
Q4_8B = ModelShape(weights_bytes=int(4.9 * GB), format="gguf", layers=32, kv_heads=8, kv_bytes_per_token=131072)


def test_a_small_gguf_runs_on_one_card_first_then_on_the_cpu_with_their_speeds():
    ways = plan(Q4_8B, [node("cuda01", gpus=ADA, bandwidth=60)], context=8192)
    offered = [w for w in ways if w.offered]
    assert [w.kind for w in offered] == ["one card", "cpu"]
    card, cpu = offered
    assert (card.cards, card.card_class, card.engine, card.nodes) == (1, "rtx6000ada-48g", "llamacpp", ("cuda01",))
    assert card.context_gb == pytest.approx(1.0)  # 8192 tokens of 128 KiB
    assert card.need_gb == pytest.approx(4.9 + 1.0 + 0.5)
    assert card.tokens_per_s == pytest.approx(960 * 0.5 / 4.9, rel=0.01)
    assert cpu.tokens_per_s == pytest.approx(60 / 4.9, rel=0.01)
    # What the card has left would hold more context: (48 GiB × 0.9 − 6.4) / 128 KiB.
    assert card.room_tokens == int((48 * 0.9 - 6.4) * GB / 131072)


def test_a_model_too_big_for_one_card_is_cut_across_the_fewest_that_hold_it():
    bf16_70b = ModelShape(weights_bytes=141 * GB, format="safetensors", layers=80, kv_heads=8,
                          kv_bytes_per_token=327680)
    h100 = cards(8, "NVIDIA H100 80GB HBM3", "h100-80g", 80, nvlink=True)
    ways = plan(bf16_70b, [node("gpu-1", memory_gb=1024, gpus=h100)], context=32768)
    best = ways[0]
    assert (best.kind, best.cards, best.engine, best.offered) == ("tensor parallel", 4, "vllm", True)
    refused = {(w.kind, w.cards): w.why_not for w in ways if not w.offered}
    assert refused[("one card", 1)].startswith("needs 155.8 GB a card; a h100-80g gives 72.0")
    assert refused[("tensor parallel", 2)].startswith("needs 78.9 GB a card")
    # Each card reads a quarter; NVLink between them keeps 0.85 of the ideal.
    assert best.tokens_per_s == pytest.approx(3350 * 0.5 / 141 * 4 * 0.85, rel=0.01)
    assert ("tensor parallel", 8) not in refused  # past the fewest that hold it nothing more is said


def test_tensor_parallel_widths_that_do_not_divide_the_kv_heads_are_refused_saying_so():
    shape = ModelShape(weights_bytes=100 * GB, format="safetensors", kv_heads=3, kv_bytes_per_token=1)
    ways = plan(shape, [node("gpu-1", memory_gb=512, gpus=cards(4, "NVIDIA A100-SXM4-80GB", "a100-80g", 80))], 1024)
    refused = {(w.kind, w.cards): w.why_not for w in ways if not w.offered}
    assert refused[("tensor parallel", 2)] == "2 cards do not divide the model's 3 KV heads"
    assert refused[("tensor parallel", 4)] == "4 cards do not divide the model's 3 KV heads"
    assert not [w for w in ways if w.offered]


def test_fp8_is_refused_on_a_card_below_compute_capability_8_9():
    shape = ModelShape(weights_bytes=8 * GB, format="safetensors", fp8=True)
    a100 = node("old", gpus=cards(1, "NVIDIA A100-SXM4-80GB", "a100-80g", 80, cc=8.0))
    h100 = node("new", gpus=cards(1, "NVIDIA H100 80GB HBM3", "h100-80g", 80))
    ways = plan(shape, [a100, h100], 4096)
    assert [(w.kind, w.nodes) for w in ways if w.offered] == [("one card", ("new",))]
    (old,) = [w for w in ways if w.nodes == ("old",)]
    assert old.why_not == "FP8 needs a card of compute capability 8.9 or more; a100-80g is 8.0"


def test_a_gguf_too_big_for_the_card_puts_what_fits_there_and_the_rest_in_memory():
    q4_70b = ModelShape(weights_bytes=42 * GB, format="gguf", layers=80, kv_bytes_per_token=327680)
    l4 = cards(1, "NVIDIA L4", "l4-24g", 24)
    ways = plan(q4_70b, [node("edge", memory_gb=128, gpus=l4, bandwidth=80)], context=4096)
    assert [w.kind for w in ways if w.offered] == ["cpu offload", "cpu"]
    offload = next(w for w in ways if w.kind == "cpu offload")
    on_card = 24 * 0.9 - 0.5
    assert offload.weights_gb == pytest.approx(on_card)
    assert offload.notes == (f"{int(80 * on_card / 42)} of 80 layers on the card",)
    # Faster than the CPU alone: part of each token is read at the card's speed.
    assert offload.tokens_per_s > next(w for w in ways if w.kind == "cpu").tokens_per_s


def test_a_model_of_experts_is_judged_by_its_active_share_read_one_and_a_half_times():
    dense = ModelShape(weights_bytes=17 * GB, format="gguf")
    experts = ModelShape(weights_bytes=17 * GB, format="gguf", active_share=0.1)
    cluster = [node("cuda01", gpus=ADA, bandwidth=60)]
    fast = plan(experts, cluster, 4096)[0].tokens_per_s
    slow = plan(dense, cluster, 4096)[0].tokens_per_s
    assert fast / slow == pytest.approx(1 / (0.1 * 1.6), rel=0.01)


def test_what_is_not_known_gives_no_figure_and_says_why():
    unknown = ModelShape(weights_bytes=4 * GB, format="gguf")
    ways = plan(unknown, [node("cpu-only", gpus=cards(1, "Some Card", "x-16g", 16))], 4096)
    card = next(w for w in ways if w.kind == "one card")
    cpu = next(w for w in ways if w.kind == "cpu")
    assert card.offered and card.tokens_per_s == 0 and card_bandwidth("Some Card") == 0
    assert card.notes == ("the context's cost is not known: not counted",)
    assert cpu.offered and cpu.tokens_per_s == 0 and "cpu-only's memory bandwidth is not measured yet" in cpu.notes


def test_a_pipeline_across_nodes_is_not_offered_without_a_fabric_and_says_so():
    ways = plan(Q4_8B, [node("a"), node("b")], 4096)
    (pipeline,) = [w for w in ways if w.kind == "pipeline"]
    assert not pipeline.offered and "fabric (InfiniBand or RoCE)" in pipeline.why_not


def test_nodes_alike_are_one_line_naming_them_all():
    ways = plan(Q4_8B, [node(f"n{i}", gpus=ADA, bandwidth=60) for i in range(3)], 4096)
    assert ways[0].kind == "one card" and ways[0].nodes == ("n0", "n1", "n2")
