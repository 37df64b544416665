"""Profiles an engine cannot run are refused before anything starts, naming the field and saying why."""

from __future__ import annotations

import json
import struct

import pytest

from llmgw import engines
from llmgw.engines import modelinfo
from llmgw.protocol.messages import EngineProfile
from tests.fixtures.tinygguf import CONTEXT, write_tiny_gguf


def refusal(engine: str, model_path: str | None = None, **kw) -> str | None:
    kw.setdefault("model", "m")
    try:
        engines.engine(engine).validate(EngineProfile(engine=engine, **kw), model_path=model_path)
    except engines.ProfileError as e:
        return str(e)
    return None


def test_llamacpp_refuses_a_source_that_is_not_a_gguf():
    assert refusal("llamacpp", source="hf:Qwen/Qwen2.5-7B-Instruct/model.safetensors") == (
        "source: llama.cpp reads a GGUF file (.gguf); the source names 'hf:Qwen/Qwen2.5-7B-Instruct/model.safetensors'")
    assert refusal("llamacpp") == "source: llama.cpp reads a GGUF file (.gguf); the source names nothing"
    assert refusal("llamacpp", source="hf:org/repo/m-Q4_K_M.gguf@3f2c1a") is None
    assert refusal("llamacpp", source="http://mirror:8081/m/v1/m-Q4_K_M.gguf?download=true") is None


def test_llamacpp_takes_a_split_gguf_set_and_refuses_a_set_without_one():
    parts = {"m-00001-of-00002.gguf": "a" * 64, "m-00002-of-00002.gguf": "b" * 64}
    assert refusal("llamacpp", source="http://mirror/m/", files=parts) is None
    assert refusal("llamacpp", source="http://mirror/m/", files={"model.safetensors": "c" * 64}) == (
        "files: llama.cpp reads GGUF files, and the set names none (a .gguf)")


def test_a_context_longer_than_the_gguf_was_trained_for_is_refused_with_both_figures(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert modelinfo.gguf_context_length(str(path)) == CONTEXT
    assert refusal("llamacpp", str(path), source="/w/tiny.gguf", context_length=CONTEXT) is None
    assert refusal("llamacpp", str(path), source="/w/tiny.gguf", context_length=CONTEXT * 2) == (
        f"context_length: {CONTEXT * 2} tokens is longer than m was trained for ({CONTEXT}, as tiny.gguf says); "
        f"give {CONTEXT} or less")


def _gguf(path, pairs):
    """A GGUF header of string and uint32 keys, a string array among them, and no tensors."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(pairs))]
    for key, value in pairs:
        out.append(struct.pack("<Q", len(key)) + key.encode())
        if isinstance(value, str):
            out.append(struct.pack("<IQ", 8, len(value)) + value.encode())
        elif isinstance(value, list):
            out.append(struct.pack("<IIQ", 9, 8, len(value)))
            out += [struct.pack("<Q", len(v)) + v.encode() for v in value]
        else:
            out.append(struct.pack("<II", 4, value))
    path.write_bytes(b"".join(out))
    return path


def test_the_gguf_header_is_read_past_a_vocabulary_to_the_architectures_context(tmp_path):
    path = _gguf(tmp_path / "q.gguf", [("general.architecture", "qwen2"), ("tokenizer.ggml.tokens", ["a", "bc"] * 50),
                                        ("llama.context_length", 999), ("qwen2.context_length", 32768)])
    assert modelinfo.gguf_context_length(str(path)) == 32768
    assert modelinfo.gguf_context_length(str(tmp_path)) == 32768  # the directory's only GGUF
    assert modelinfo.gguf_context_length(str(tmp_path / "absent.gguf")) == 0
    (tmp_path / "q.gguf").write_bytes(b"GGUF" + b"\xff" * 40)
    assert modelinfo.gguf_context_length(str(path)) == 0


def test_a_file_that_is_not_a_gguf_is_refused_before_llamacpp_is_started_on_it(tmp_path):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"<html>not found</html>")
    assert refusal("llamacpp", str(fake), source="/w/m.gguf") == (
        f"source: {fake} is not a GGUF file (it does not begin with GGUF)")


def test_a_context_longer_than_a_checkpoints_config_says_is_refused_counting_its_rope_scaling(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    assert refusal("vllm", str(tmp_path), source="/w", gpus=[0], context_length=65536).startswith(
        "context_length: 65536 tokens is longer than m was trained for (32768, as ")
    (tmp_path / "config.json").write_text(json.dumps({
        "max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 32768}}))
    assert refusal("sglang", str(tmp_path), source="/w", gpus=[0], context_length=131072) is None
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 8192}}))
    assert refusal("freetoken", str(tmp_path), source="/w", gpus=[0], context_length=16384) is not None


def test_the_sim_refuses_gpus_it_would_hold_for_nothing():
    assert refusal("sim", gpus=[0]) == "gpus: sim needs no GPU; a card named here would be held for nothing (gpus: [])"
    assert refusal("sim") is None


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "freetoken", "strata"])
def test_an_engine_that_runs_on_nvidia_cards_refuses_a_profile_without_one(engine):
    args = ["--family", "qwen", "--size", "IQ2_XS"] if engine == "strata" else []
    said = refusal(engine, source="/w/m", args=args)
    assert said == f"gpus: {engine} runs on NVIDIA GPUs; give the profile at least one (gpus: [0])"


@pytest.mark.parametrize(("engine", "most"), [("freetoken", "one GPU"), ("strata", "one GPU"),
                                              ("comfyui", "one GPU a shard, or none")])
def test_an_engine_of_one_card_refuses_two(engine, most):
    args = ["--family", "qwen", "--size", "IQ2_XS"] if engine == "strata" else []
    said = refusal(engine, source="/w/m", gpus=[0, 1], args=args)
    assert said is not None and said.startswith(f"gpus: {engine} runs on {most}")


def test_strata_needs_the_family_and_size_its_setup_prepares():
    assert refusal("strata", source="/w/q", gpus=[0], args=["--family", "qwen"]) == (
        "args: strata prepares a model by its family and size, and --size is missing (e.g. --family qwen "
        "--size IQ2_XS)")


def test_trtllm_refuses_a_hub_id_it_would_download_with_its_pickles_unless_the_model_allows_them():
    said = refusal("trtllm", source="meta-llama/Llama-3.1-8B-Instruct", gpus=[0])
    assert said.startswith("source: trtllm downloads meta-llama/Llama-3.1-8B-Instruct itself and may load its "
                           "pickle files")
    assert refusal("trtllm", source="meta-llama/Llama-3.1-8B-Instruct", gpus=[0], allow_pickle=True) is None


@pytest.mark.parametrize(("kw", "said"), [
    ({"model": ""}, "model: expected the name the model is served under, without spaces, got ''"),
    ({"model": "my model"}, "model: expected the name the model is served under, without spaces, got 'my model'"),
    ({"slots": -1}, "slots: expected 0 or a whole number above it, got -1"),
    ({"gpus": [0, 0]}, "gpus[1]: GPU 0 is named twice"),
    ({"gpus": [-1]}, "gpus[0]: expected a GPU's index (0, 1, …), got -1"),
    ({"role": "guard"}, "role: expected judge, embedding or nothing, got 'guard'"),
    ({"args": ["--jinja", 8192]}, "args[1]: expected text, got 8192; write it in quotes"),
    ({"engine": "vllm"}, "engine: the profile is for 'vllm', not llamacpp"),
])
def test_fields_every_engine_reads_are_checked_the_same_way(kw, said):
    kw = {"source": "/w/m.gguf", "engine": "llamacpp", **kw}
    engine = kw.pop("engine")
    kw.setdefault("model", "m")
    try:
        engines.engine("llamacpp").validate(EngineProfile(engine=engine, **kw))
    except engines.ProfileError as e:
        assert str(e) == said
        assert e.field == said.split(":")[0]
    else:
        pytest.fail("accepted")


@pytest.mark.parametrize(("path", "hub"), [
    ("Qwen/Qwen2.5-7B-Instruct", True), ("/var/lib/llmgw/weights/abc/", False), ("./local", False),
    ("http://m/q/v/", False), ("q.gguf", False), ("org/name:Q4_K_M", False), ("a/b/c", False),
])
def test_a_hugging_face_id_is_told_from_a_path(path, hub):
    assert modelinfo.hub_id(path) is hub


@pytest.mark.parametrize(("source", "name"), [
    ("hf:org/repo/m.gguf@abc", "m.gguf"), ("hf:org/repo/m.gguf@refs/pr/1", "m.gguf"),
    ("http://x/m.gguf?download=true", "m.gguf"), ("http://x/m%2Egguf#frag", "m.gguf"), ("/w/m.GGUF", "m.GGUF"),
])
def test_a_sources_file_name_is_read_past_its_query_fragment_and_revision(source, name):
    assert modelinfo.file_name(source) == name
    assert modelinfo.is_gguf(source)


def test_the_command_for_fetched_weights_checks_them_too_so_an_agent_never_starts_past_the_models_context(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    p = EngineProfile(engine="llamacpp", model="tiny", source="/w/tiny.gguf", context_length=CONTEXT + 1)
    with pytest.raises(engines.ProfileError, match=f"longer than tiny was trained for \\({CONTEXT}"):
        engines.engine("llamacpp").command(p, model_path=str(path), port=1, host="127.0.0.1")
