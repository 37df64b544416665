"""Model files: what the catalog takes, and refusals that name the key and say what to write."""

from __future__ import annotations

import pytest

from llmgw.control.catalog import SpecError, load_spec, parse_spec_text

GOOD = """
name: qwen-7b
aliases: [qwen, Qwen/Qwen2.5-7B-Instruct]
source: hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf
sha256: 3f1c5a1d0b9e8f7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b
context_length: 8192
slots: 4
max_output: 2048
profiles:
  - engine: vllm
    gpus: {count: 2, classes: [h100, a100-80g], memory: 30GB, min_compute_capability: "8.0"}
    memory: 16GB
  - engine: llamacpp
    cpu_cores: 8
    memory: 12GB
    node_selector: {zone: b}
scaling:
  min: 1
  max: 3
  on_demand: {evict_after_idle: 1m}
"""


def refusal(doc: dict) -> str:
    with pytest.raises(SpecError) as e:
        load_spec(doc)
    return str(e.value)


def base(**changes) -> dict:
    doc = {"name": "m", "source": "/models/m.gguf", "profiles": [{"engine": "llamacpp", "memory": "4GB"}]}
    doc.update(changes)
    return doc


def test_a_full_model_file_loads_with_its_sizes_durations_and_defaults():
    spec = parse_spec_text(GOOD)
    assert spec.aliases == ["qwen", "Qwen/Qwen2.5-7B-Instruct"]
    assert int(spec.profiles[0].gpus.memory) == 30 * 1024**3
    assert spec.profiles[0].gpus.min_cc == 8.0
    assert spec.profiles[1].node_selector == {"zone": "b"}
    assert float(spec.scaling.on_demand.evict_after_idle) == 60
    assert float(spec.scaling.on_demand.min_lifetime) == 300  # the default
    assert spec.replace == "beside" and spec.stopped is False


def test_a_spec_written_back_loads_the_same():
    spec = parse_spec_text(GOOD)
    assert load_spec(spec.to_doc()) == spec
    assert spec.to_doc()["profiles"][0]["gpus"]["memory"] == "30GB"


def test_json_is_read_as_well_as_yaml():
    spec = parse_spec_text('{"name": "s", "profiles": [{"engine": "sim"}]}')
    assert spec.source == "" and spec.profiles[0].engine == "sim"


def test_an_unknown_key_is_refused_with_the_nearest_known_one():
    assert refusal(base(contxt_length=4096)) == "contxt_length: unknown key; did you mean context_length?"


def test_a_key_deep_in_a_profile_is_named_by_its_path():
    doc = base(profiles=[{"engine": "llamacpp"}, {"engine": "vllm", "gpus": {"count": "two"}}])
    assert refusal(doc) == 'profiles[1].gpus.count: expected a whole number, got "two"'


def test_a_misspelt_engine_is_refused_with_the_one_meant():
    assert refusal(base(profiles=[{"engine": "llama.cpp"}])) == (
        'profiles[0].engine: unknown engine "llama.cpp"; did you mean llamacpp?')


def test_a_memory_written_as_a_bare_number_is_refused_as_bytes():
    assert "4096 is 4096 bytes; write a size like 4GB" in refusal(base(profiles=[{"engine": "llamacpp",
                                                                                  "memory": 4096}]))


def test_the_name_is_required_and_has_no_slash():
    doc = base()
    del doc["name"]
    assert refusal(doc) == "name: required, and not set"
    assert refusal(base(name="Qwen/Qwen2")).startswith('name: "Qwen/Qwen2" is not a model name')


def test_weights_in_a_pickle_format_are_refused_unless_the_model_allows_it():
    said = refusal(base(source="hf:org/repo/pytorch_model.bin?download=true"))
    assert said.startswith("source: hf:org/repo/pytorch_model.bin?download=true is in a pickle format")
    assert "allow_pickle: true" in said
    assert load_spec(base(source="hf:org/repo/pytorch_model.bin", allow_pickle=True)).allow_pickle


def test_a_pickle_file_in_a_set_is_named():
    digest = "a" * 64
    said = refusal(base(source="hf:org/repo", files={"model.safetensors": digest, "extra.pt": digest}))
    assert said.startswith("files.extra.pt: extra.pt is in a pickle format")


def test_a_source_that_is_no_kind_of_source_is_refused():
    assert "is neither an absolute path" in refusal(base(source="models/m.gguf"))


def test_a_model_on_a_real_engine_needs_a_source_and_sim_needs_none():
    doc = base()
    del doc["source"]
    assert refusal(doc).startswith("source: required")
    assert load_spec({"name": "s", "profiles": [{"engine": "sim"}]}).source == ""


def test_the_longest_answer_must_fit_the_context_and_the_context_the_training():
    assert refusal(base(context_length=4096, max_output=8192)) == (
        "max_output: 8192 is more than context_length (4096); an answer must fit in the context")
    assert refusal(base(context_length=65536, trained_context=32768)) == (
        "context_length: 65536 is longer than the model was trained for (32768 tokens)")


def test_a_sha256_that_is_not_one_is_refused():
    assert refusal(base(sha256="abc")) == "sha256: expected 64 lowercase hexadecimal digits, as sha256sum prints"


def test_a_max_below_min_is_refused():
    assert refusal(base(scaling={"min": 3, "max": 2})) == "scaling.max: 2 is fewer than min (3)"


def test_a_model_with_no_profile_is_refused():
    assert refusal(base(profiles=[])).startswith("profiles: needs at least one profile")


def test_a_compute_capability_is_written_as_major_dot_minor():
    doc = base(profiles=[{"engine": "vllm", "gpus": {"min_compute_capability": "ampere"}}])
    assert refusal(doc) == ('profiles[0].gpus.min_compute_capability: expected a compute capability like "8.9", '
                            'got "ampere"')


def test_the_profile_hash_moves_with_what_the_engine_gets_and_not_with_the_gateways_own_limits():
    spec = load_spec(base(context_length=4096, max_output=512))
    same = load_spec(base(context_length=4096, max_output=1024, aliases=["x"]))
    longer = load_spec(base(context_length=8192))
    assert spec.profile_hash(0) == same.profile_hash(0)
    assert spec.profile_hash(0) != longer.profile_hash(0)
    assert spec.profile_hash(0) != spec.profile_hash(0, restarts=1)


def test_an_engine_profile_carries_what_the_shard_needs():
    spec = load_spec(base(context_length=4096, slots=2, role="judge", sha256="b" * 64))
    p = spec.engine_profile(0, [1])
    assert (p.engine, p.model, p.memory_mb, p.context_length, p.slots, p.role, p.gpus, p.sha256) == (
        "llamacpp", "m", 4096, 4096, 2, "judge", [1], "b" * 64)


def test_a_file_that_is_not_yaml_says_where():
    with pytest.raises(SpecError) as e:
        parse_spec_text("name: [x\n", "qwen.yaml")
    assert str(e.value).startswith("qwen.yaml: line 2, column 1:")


def test_a_card_count_past_any_replica_is_refused_before_the_cards_are_numbered():
    # 2**63 cards once ran the admin API out of memory numbering them (found by the fuzz of issue 10).
    profiles = [{"engine": "vllm", "memory": "4GB", "gpus": {"count": 2 ** 63 - 1}}]
    assert "profiles[0].gpus.count: must be at most 1024" in refusal(base(source="hf:org/m", profiles=profiles))
