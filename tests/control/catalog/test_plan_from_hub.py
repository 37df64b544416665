"""What a model on a hub is, read before it is fetched (a GGUF's header, a checkpoint's config.json), and the
plan the catalog makes of it over the nodes in the store (both dialects)."""

from __future__ import annotations

import json

import pytest
from cluster_helpers import NOW

from llmgw.config import HubSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.service import Catalog
from llmgw.control.catalog.shapes import describe_source
from llmgw.hub import Hub as HubClient
from llmgw.protocol import GPU, Heartbeat, Host, Register, to_dict
from llmgw.store import NodeRecord
from tests.support.hfhub import Hub, gguf_bytes, safetensors_bytes

# Llama-3.1-8B's shape in a small file: 32 layers, 32 heads of 128 (4096 wide), 8 of them for K and V.
LLAMA = gguf_bytes(block_count=32, embedding_length=4096, head_count=32, head_count_kv=8, context_length=131072,
                   parameters=4096 * 64)
CONFIG = {"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_size": 2048,
          "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "max_position_embeddings": 262144}


@pytest.fixture
async def hub():
    hub = await Hub().start()
    yield hub
    await hub.stop()


async def test_a_ggufs_header_gives_its_layers_kv_heads_and_what_a_token_of_context_costs(hub):
    repo = hub.repo("Qwen/Llama-GGUF", files={"llama-q4.gguf": LLAMA})
    described = await describe_source(HubClient(hub.url), "hf:Qwen/Llama-GGUF/llama-q4.gguf")
    shape = described.shape
    assert (shape.format, shape.layers, shape.kv_heads, shape.trained_context) == ("gguf", 32, 8, 131072)
    assert shape.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2  # K and V at f16: 128 KiB
    assert shape.weights_bytes == len(LLAMA) and shape.active_share == 1
    assert (described.commit, described.files) == (repo.main, ("llama-q4.gguf",))
    # Only the header was read, not the file.
    assert hub.count("cdn") == 1 and hub.bytes_served() <= len(LLAMA)


async def test_a_split_gguf_is_planned_whole_whichever_part_is_named(hub):
    parts = {f"big-0000{i}-of-00003.gguf": LLAMA if i == 1 else b"\0" * 4096 for i in (1, 2, 3)}
    hub.repo("Qwen/Big-GGUF", files=parts)
    described = await describe_source(HubClient(hub.url), "hf:Qwen/Big-GGUF/big-00002-of-00003.gguf")
    assert described.shape.weights_bytes == len(LLAMA) + 2 * 4096 and described.shape.layers == 32
    assert described.files == tuple(sorted(parts))


async def test_a_checkpoint_is_read_from_its_config_and_a_model_of_experts_by_its_active_share(hub):
    weights = safetensors_bytes()
    hub.repo("Qwen/Qwen3-30B-A3B", files={"config.json": json.dumps(CONFIG).encode(),
                                          "model-1.safetensors": weights, "model-2.safetensors": weights})
    shape = (await describe_source(HubClient(hub.url), "hf:Qwen/Qwen3-30B-A3B")).shape
    assert (shape.format, shape.engine, shape.layers, shape.kv_heads) == ("safetensors", "vllm", 48, 4)
    assert shape.kv_bytes_per_token == 48 * 4 * 128 * 4
    assert shape.weights_bytes == 2 * len(weights) and shape.trained_context == 262144
    assert shape.active_share == pytest.approx(0.1)  # named 30B-A3B
    assert not shape.fp8


async def test_an_fp8_checkpoint_is_known_by_its_quantisation(hub):
    config = {**CONFIG, "quantization_config": {"quant_method": "fp8"}}
    hub.repo("Qwen/Dense", files={"config.json": json.dumps(config).encode(), "m.safetensors": safetensors_bytes()})
    shape = (await describe_source(HubClient(hub.url), "hf:Qwen/Dense")).shape
    assert shape.fp8 and shape.active_share == pytest.approx(8 / 128)  # its routing, having no A-part in its name


async def test_what_cannot_be_planned_is_refused_saying_what_to_give(hub):
    hub.repo("Qwen/Only-GGUF", files={"a-q4.gguf": LLAMA, "a-q8.gguf": LLAMA})
    hub.repo("someone/Pickled", files={"pytorch_model.bin": b"\0" * 64})
    client = HubClient(hub.url)
    cases = [("hf:Qwen/Only-GGUF", "holds GGUF files: name the one to plan, as hf:Qwen/Only-GGUF/FILE (a-q4.gguf, "
                                   "a-q8.gguf)"),
             ("hf:someone/Pickled", "has neither GGUF nor safetensors weights"),
             ("hf:Qwen/Only-GGUF/a-q2.gguf", "has no file a-q2.gguf"),
             ("hf:Qwen/Only-GGUF/config.json", "config.json is not a GGUF file")]
    for source, said in cases:
        with pytest.raises(Refusal) as refused:
            await describe_source(client, source)
        assert said in str(refused.value), str(refused.value)


async def put_node(store, name: str, gpus: list[GPU], bandwidth: float = 40.0, memory_gb: int = 64) -> None:
    register = Register(node_id=f"id-{name}", name=name, version="1",
                        host=Host(hostname=name, cpu_cores=16, cpu_threads=16, memory_mb=memory_gb * 1024),
                        gpus=gpus, engines={"llamacpp": "b6000", "vllm": "0.11"})
    beat = Heartbeat(at=NOW, mem_bandwidth_gbs=bandwidth)
    await store.put_node(NodeRecord(f"id-{name}", name, to_dict(register), heartbeat=to_dict(beat),
                                    heartbeat_at=NOW, first_seen=NOW, updated_at=NOW))


async def test_the_catalogs_plan_judges_the_nodes_in_the_store_as_they_are(store, hub):
    hub.repo("Qwen/Llama-GGUF", files={"llama-q4.gguf": LLAMA})
    await put_node(store, "cuda01", [GPU(index=0, name="NVIDIA RTX 6000 Ada Generation", memory_mb=49140,
                                         compute_capability="8.9")])
    await put_node(store, "cpu01", [], bandwidth=80.0)

    async def audit(*_):
        return None

    catalog = Catalog(store, audit, clock=lambda: NOW, hub=lambda: HubSettings(endpoint=hub.url))
    planned = await catalog.plan("hf:Qwen/Llama-GGUF/llama-q4.gguf", context=4096)
    assert planned["context"] == 4096 and planned["judged_by"] == {"nodes": 2, "cards": 1, "left_out": 0}
    offered = [(w["kind"], tuple(w["nodes"])) for w in planned["layouts"] if w["offered"]]
    assert offered[0] == ("one card", ("cuda01",))
    # The CPUs: the faster memory first.
    assert [nodes for kind, nodes in offered if kind == "cpu"] == [("cpu01",), ("cuda01",)]
    assert planned["layouts"][0]["context_gb"] == pytest.approx(0.5)  # 4096 tokens of 128 KiB
    # No context asked: the model's own, at most 8192.
    assert (await catalog.plan("hf:Qwen/Llama-GGUF/llama-q4.gguf"))["context"] == 8192


async def test_serving_a_way_of_the_plan_takes_its_engine_cards_and_memory(store, hub):
    from llmgw.account.service import Actor

    hub.repo("Qwen/Llama-GGUF", files={"llama-q4.gguf": LLAMA})
    await put_node(store, "cuda01", [GPU(index=0, name="NVIDIA RTX 6000 Ada Generation", memory_mb=49140,
                                         compute_capability="8.9")])

    async def audit(*_):
        return None

    catalog = Catalog(store, audit, clock=lambda: NOW, hub=lambda: HubSettings(endpoint=hub.url))
    alice = Actor("alice", "cli")
    source = "hf:Qwen/Llama-GGUF/llama-q4.gguf"
    on_card = await catalog.serve(alice, source, layout=1, context=4096, name="on-card")
    profile = on_card["model"]["spec"]["profiles"][0]
    assert (profile["engine"], profile["gpus"]["count"]) == ("llamacpp", 1)
    assert on_card["model"]["spec"]["context_length"] == 4096
    assert on_card["notes"][0] == \
        "the plan's way 1: one card on 1 × rtx6000ada-48g, llamacpp, at 4096 tokens of context"
    on_cpu = await catalog.serve(alice, source, layout=2, name="on-cpu")
    profile = on_cpu["model"]["spec"]["profiles"][0]
    # 1 GB of context at the model's 8192 tokens, the 1 GB kept beside, and the file: 3 GB.
    assert profile["engine"] == "llamacpp" and not profile.get("gpus") and profile["memory"] == "3GB"
    with pytest.raises(Refusal) as refused:
        await catalog.serve(alice, source, layout=3, name="none")
    assert str(refused.value).startswith(f"--layout 3: the plan offers 2 way(s) for {source} here")
    with pytest.raises(Refusal) as refused:
        await catalog.serve(alice, source, layout=1, engine="vllm", name="wrong")
    assert "--layout 1 runs on llamacpp" in str(refused.value)
