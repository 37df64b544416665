"""The explorer: a hub's search, each repository judged by what the cluster's nodes can run, what cannot left out
and counted by why (against the hub stand-in, tests/support/hfhub.py)."""

from __future__ import annotations

import pytest

from llmgw.config import HubSettings
from llmgw.control.catalog.cluster import GPUView, NodeView
from llmgw.control.catalog.explorer import explore, view
from llmgw.hub import Hub as HubClient
from tests.support.hfhub import Hub, gguf_bytes, safetensors_bytes

SETTINGS = HubSettings()
WEIGHTS = gguf_bytes()


@pytest.fixture
async def hub():
    hub = await Hub().start()
    hub.repo("Qwen/Tiny-GGUF", files={"tiny-Q4_K_M.gguf": WEIGHTS, "tiny-Q8_0.gguf": WEIGHTS + WEIGHTS,
                                      "mmproj-tiny-f16.gguf": WEIGHTS})
    hub.repo("someone/Tiny-Split-GGUF", files={"tiny-Q4_K_M-00001-of-00002.gguf": WEIGHTS,
                                               "tiny-Q4_K_M-00002-of-00002.gguf": WEIGHTS})
    hub.repo("someone/Tiny-MLX", files={"model.safetensors": safetensors_bytes()}, library_name="mlx")
    hub.repo("someone/Tiny-Pickled", files={"pytorch_model.bin": b"\0" * 64})
    hub.repo("someone/Tiny-Docs", files={"README.md": b"# nothing\n"})
    hub.repo("Qwen/Tiny-FP8", files={"model.safetensors": safetensors_bytes()})
    yield hub
    await hub.stop()


def node(name: str, memory_mb: int = 64 * 1024, gpus: tuple[GPUView, ...] = ()) -> NodeView:
    return NodeView(id=f"id-{name}", name=name, cores=8, memory_mb=memory_mb, gpus=gpus, mem_bandwidth_gbs=50)


A100 = (GPUView(0, "a100-80g", 81920, 0, 8.0, "NVIDIA A100-SXM4-80GB"),)


async def test_what_runs_here_is_listed_with_its_formats_and_what_does_not_is_counted_by_why(hub):
    explored = await explore(HubClient(hub.url), SETTINGS, [node("cpu01"), node("gpu01", gpus=A100)], "tiny")
    by_repo = {c.repo: c for c in explored.candidates}
    tiny = by_repo["Qwen/Tiny-GGUF"]
    assert tiny.runs and tiny.trusted and tiny.publisher == "Qwen" and tiny.scan == "safe"
    assert [(c.name, c.format, c.runs) for c in tiny.choices] == [("Q4_K_M", "gguf", True), ("Q8_0", "gguf", True)]
    assert tiny.choices[0].way == "1 × a100-80g, llamacpp" and tiny.choices[0].cpu_tokens_per_s > 0
    split = by_repo["someone/Tiny-Split-GGUF"]
    assert not split.trusted and [c.name for c in split.choices] == ["Q4_K_M"]  # the parts as one
    assert explored.left_out == {"mlx": 1, "pickle only": 1, "no weights": 1, "fp8": 1}
    assert by_repo["Qwen/Tiny-FP8"].left_out == "fp8"  # an A100 is 8.0


async def test_a_cluster_too_small_for_anything_leaves_everything_out_as_too_big(hub):
    explored = await explore(HubClient(hub.url), SETTINGS, [node("pi", memory_mb=512)], "GGUF")
    assert [c.repo for c in explored.candidates] == ["Qwen/Tiny-GGUF", "someone/Tiny-Split-GGUF"]
    assert explored.left_out == {"too big": 2}
    doc = view(explored, [node("pi", memory_mb=512)])
    assert doc["judged_by"]["nodes"] == 1 and "FP8 without a card of 8.9" in doc["judged_by"]["rules"]
    assert doc["candidates"][0]["runs"] is False and doc["candidates"][0]["left_out"] == "too big"


async def test_safetensors_alone_on_a_cluster_without_cards_is_left_out_saying_so(hub):
    hub.repo("Qwen/Tiny-Dense", files={"config.json": b"{}", "model.safetensors": safetensors_bytes()})
    explored = await explore(HubClient(hub.url), SETTINGS, [node("cpu01")], "Tiny-Dense")
    assert explored.left_out == {"no cards": 1}


async def test_a_search_that_finds_nothing_is_an_empty_list(hub):
    explored = await explore(HubClient(hub.url), SETTINGS, [node("cpu01")], "no-such-model")
    assert explored.candidates == [] and explored.left_out == {}


async def test_the_context_a_model_needs_is_read_from_its_smallest_gguf_header_and_judged_as_serving_would():
    hub = await Hub().start()
    try:
        # Weights of a few kilobytes, and the attention of a 70B: 80 layers, 8 KV heads of 128, 320 KiB a token,
        # 1.3 GB at the explorer's 4,096 tokens, which a node of 1 GB cannot hold however small the weights.
        wide = gguf_bytes(block_count=80, embedding_length=8192, head_count=64, head_count_kv=8)
        hub.repo("Qwen/Wide-GGUF", files={"wide-Q4_K_M.gguf": wide, "wide-Q8_0.gguf": wide + b"\0" * 4096})
        explored = await explore(HubClient(hub.url), SETTINGS, [node("small", memory_mb=1024)], "wide")
        assert explored.left_out == {"too big": 1}
        explored = await explore(HubClient(hub.url), SETTINGS, [node("big", memory_mb=8192)], "wide")
        assert [(c.name, c.runs) for c in explored.candidates[0].choices] == [("Q4_K_M", True), ("Q8_0", True)]
        # One ranged read of the smallest quantisation's header, however many quantisations it has.
        reads = [h for h in hub.hits if h.kind in ("resolve", "cdn") and h.range]
        assert {h.path.rsplit("/", 1)[-1] for h in reads} == {"wide-Q4_K_M.gguf"}
        assert all(h.range == f"bytes=0-{(256 << 10) - 1}" for h in reads)
    finally:
        await hub.stop()
