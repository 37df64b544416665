"""Flags and variables that load code or move where an engine reads or writes are refused, however spelt."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmgw import engines
from llmgw.engines import comfyui, freetoken, llamacpp, sglang, sim, strata, trtllm, vllm
from llmgw.engines.refusals import check_args, env_refusal, names_a_file, refused
from llmgw.protocol.messages import EngineProfile

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"

# Each engine's refused flags, and whether it parses with argparse (which
# takes a beginning of a flag for the flag).
TABLES = {
    "llamacpp": (llamacpp.FLAGS + llamacpp.JUDGE_FLAGS, False),
    "sim": (sim.FLAGS, True),
    "vllm": (vllm.FLAGS, True),
    "sglang": (sglang.FLAGS, True),
    "trtllm": (trtllm.FLAGS, False),
    "comfyui": (comfyui.FLAGS, True),
    "strata": (strata.FLAGS, True),
    "freetoken": (freetoken.FLAGS, True),
}

# A value every conditional refusal refuses: a path to a file named like a
# template, with "model" and a dot in it.
PATH_VALUE = "/srv/x/model.jinja"


def profile(engine: str, args=(), env=None, **kw) -> EngineProfile:
    base = {"source": "/w/m.gguf" if engine == "llamacpp" else "/w/m", "gpus": [] if engine in ("sim",) else [0]}
    if engine == "llamacpp":
        base["gpus"] = []
        base["role"] = "judge"  # so its --cache-ram rule is in force too
    if engine == "comfyui":
        base["gpus"] = []
    args = list(args)
    if engine == "strata":
        args += ["--family", "qwen", "--size", "IQ2_XS"]
    base.update(kw)
    return EngineProfile(engine=engine, model="m", args=args, env=env or {}, **base)


def refusal(engine: str, args=(), env=None, **kw) -> str | None:
    try:
        engines.engine(engine).validate(profile(engine, args, env, **kw))
    except engines.ProfileError as e:
        return str(e)
    return None


def spellings(engine: str) -> list[tuple[str, list[str]]]:
    """Every refused flag of the engine, each in the ways it can be written to reach it."""
    flags, argparse_engine = TABLES[engine]
    out = []
    for flag in flags:
        for spelling in flag.spellings:
            out.append((engine, [spelling, PATH_VALUE]))
            out.append((engine, [f"{spelling}={PATH_VALUE}"]))
            if spelling.startswith("--"):
                swapped = "--" + spelling[2:].translate(str.maketrans("-_", "_-"))
                if swapped != spelling:
                    out.append((engine, [swapped, PATH_VALUE]))
            if argparse_engine:
                short = spelling[:-1]
                if len(short) > 2:
                    out.append((engine, [short, PATH_VALUE]))
    return out


ALL_SPELLINGS = [case for engine in TABLES for case in spellings(engine)]


@pytest.mark.parametrize(("engine", "args"), ALL_SPELLINGS, ids=[f"{e}:{' '.join(a)}" for e, a in ALL_SPELLINGS])
def test_every_refused_flag_is_refused_however_it_is_written(engine, args):
    said = refusal(engine, args)
    assert said is not None, f"{engine} {args} was let through"
    assert said.startswith(f"args[0]: {engine} may not be given {args[0].split('=')[0]}")
    assert ": it " in said


@pytest.mark.parametrize(("engine", "args", "read_as"), [
    ("vllm", ["--trust-remote-code"], None),
    ("vllm", ["--trust_remote_code"], "--trust-remote-code"),
    ("vllm", ["--trust-remote"], "--trust-remote-code"),
    ("vllm", ["--trust-rem"], "--trust-remote-code"),
    ("vllm", ["--trust-remote-code=true"], None),
    ("vllm", ["--load_format", "pt"], "--load-format"),
    ("vllm", ["--load-form=pt"], "--load-format"),
    ("vllm", ["--hf-overrides.auto_map", "{}"], "--hf-overrides"),
    ("vllm", ["-tp", "2"], None),
    ("sglang", ["--load-format", "pt"], None),
    ("sglang", ["--trust-remote"], "--trust-remote-code"),
    ("sglang", ["--enable-custom-logit"], "--enable-custom-logit-processor"),
    ("comfyui", ["--li", "0.0.0.0"], "--listen"),
    ("comfyui", ["--enable-man"], "--enable-manager"),
    ("strata", ["--mod", "x"], "--model"),
    ("strata", ["--data-dir=/etc"], None),
    ("freetoken", ["--allowed-local", "/"], "--allowed-local-media-path"),
    ("trtllm", ["--trust-remote-code"], None),
    ("sglang", ["--trust_remote_code"], None),
    ("trtllm", ["--extra_llm_api_options", "/tmp/x.yaml"], None),
    ("llamacpp", ["-hf", "org/repo"], None),
    ("llamacpp", ["-mu", "http://x/m.gguf"], None),
    ("llamacpp", ["--lora=/tmp/a.gguf"], None),
    ("llamacpp", ["--rpc", "10.0.0.9:50052"], None),
])
def test_a_refusal_names_the_flag_as_written_and_what_the_engine_reads_it_as(engine, args, read_as):
    said = refusal(engine, args)
    assert said is not None
    written = args[0].split("=")[0]
    if read_as:
        assert f"may not be given {written} ({engine} reads it as {read_as}): it " in said
    else:
        assert f"may not be given {written}: it " in said


def test_trust_remote_code_says_it_runs_the_repositorys_code():
    assert refusal("vllm", ["--trust-remote"]) == (
        "args[0]: vllm may not be given --trust-remote (vllm reads it as --trust-remote-code): it runs the Python "
        "code a model's repository ships, as the engine's user")


def test_a_flag_the_profile_sets_elsewhere_says_which_field_to_set():
    assert refusal("vllm", ["--max-model-len", "8192"]) == (
        "args[0]: vllm may not be given --max-model-len: it is given by the agent from the profile's "
        "context_length; set that instead")
    assert refusal("llamacpp", ["--log-disable", "-np", "8"]).startswith("args[1]: llamacpp may not be given -np: "
                                                                          "it is given by the agent from the "
                                                                          "profile's slots")


@pytest.mark.parametrize(("engine", "args"), [
    ("vllm", ["--tokenizer-mode", "mistral"]),
    ("vllm", ["--gpu-memory-utilization=0.9"]),
    ("vllm", ["--max-num-batched-tokens", "8192"]),
    ("vllm", ["--enable-prefix-caching", "--kv-cache-dtype", "fp8"]),
    ("vllm", ["--chat-template", "{% for m in messages %}{{ m.content }}{% endfor %}"]),
    ("vllm", ["--generation-config", "vllm"]),
    ("vllm", ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']),
    ("vllm", ["--speculative-config.method", "ngram"]),
    ("vllm", ["--model-impl", "transformers"]),
    ("vllm", ["--revision", "a09a354", "--config-format", "hf"]),
    ("sglang", ["--chat-template", "chatml", "--mem-fraction-static", "0.8"]),
    ("sglang", ["--tokenizer-mode", "auto", "--reasoning-parser", "qwen3"]),
    ("llamacpp", ["--chat-template", "chatml", "--jinja", "-fa", "on", "-ngl", "20"]),
    ("llamacpp", ["--pooling", "cls", "--override-kv", "x=int:1", "-ctk", "q8_0"]),
    ("trtllm", ["--kv_cache_free_gpu_memory_fraction", "0.9", "--custom_tokenizer", "deepseek_v32"]),
    ("trtllm", ["--trust_remote"]),  # not a flag click takes: it refuses it itself
    ("comfyui", ["--lowvram", "--preview-method", "auto"]),
    ("strata", ["--vram-reserve-mib", "2048", "--vision", "no"]),
    ("freetoken", ["--moe-strategy", "auto", "--dtype", "bf16", "--moe-cache-auto"]),
    ("sim", ["--tokens-per-second", "50", "--ttft", "0.2", "--embedding-model", "all-MiniLM-L6-v2"]),
    ("sim", ["--max-tokens-default", "-1"]),
])
def test_what_is_not_a_refused_flag_nor_a_beginning_of_one_passes(engine, args):
    assert refusal(engine, args) is None


def test_llamacpp_takes_no_beginnings_so_its_own_short_flags_are_matched_as_written():
    assert refusal("llamacpp", ["-m", "/etc/passwd"]).startswith("args[0]: llamacpp may not be given -m: it names")
    assert refusal("llamacpp", ["-hff", "m.gguf"]) is not None
    # --chat-template is a flag of its own there, not a beginning of --chat-template-file.
    assert refusal("llamacpp", ["--chat-template", "chatml"]) is None


def test_a_bare_double_dash_is_refused_since_what_follows_would_reach_the_engine_unchecked():
    assert refusal("vllm", ["--", "--trust-remote-code"]) == (
        "args[0]: vllm may not be given a bare --: it ends the engine's options, and what follows would reach it "
        "unchecked")


def test_cache_ram_is_the_agents_for_a_judge_and_the_profiles_otherwise():
    assert refusal("llamacpp", ["--cache-ram", "4096"], role="judge").startswith(
        "args[0]: llamacpp may not be given --cache-ram: it is 0 for a judge")
    assert refusal("llamacpp", ["-cram", "4096"], role="") is None


# --- variables ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PATH", "HOME", "HTTPS_PROXY",
    "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_HUB_TRUST_REMOTE_CODE", "HF_DATASETS_TRUST_REMOTE_CODE",
    "HF_TOKEN", "HF_ENDPOINT", "VLLM_PLUGINS", "VLLM_CONFIG_ROOT", "VLLM_CACHE_ROOT", "VLLM_HOST_IP", "VLLM_PORT",
    "VLLM_API_KEY", "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    "VLLM_LOGGING_CONFIG_PATH", "TORCH_HOME", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "NCCL_NET_PLUGIN",
    "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LLAMA_ARG_MODEL", "LLAMA_ARG_LORA",
    "LLAMA_CACHE", "FREETOKEN_API_KEY", "FREETOKEN_API_LOG_DIR", "FREETOKEN_MMPROJ", "FREETOKEN_HOST",
    "STRATA_API_KEY", "ld_preload", "XDG_CACHE_HOME", "HUGGING_FACE_HUB_TOKEN", "1BAD", "A-B",
])
def test_a_variable_that_moves_where_an_engine_reads_or_writes_or_loads_code_is_refused(name):
    said = refusal("vllm", env={name: "/tmp/x"})
    assert said is not None and said.startswith(f"env[{name}]: vllm may not be given {name}: it ")


@pytest.mark.parametrize("name", [
    "OMP_NUM_THREADS", "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1", "NCCL_DEBUG", "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME", "TOKENIZERS_PARALLELISM", "PYTORCH_CUDA_ALLOC_CONF", "HF_HUB_OFFLINE",
    "HF_HUB_ENABLE_HF_TRANSFER", "GGML_CUDA_ENABLE_UNIFIED_MEMORY", "FREETOKEN_PIN_BUDGET_GB", "CUDA_LAUNCH_BLOCKING",
    "PYTHONUNBUFFERED", "TZ", "SGLANG_ENABLE_TORCH_COMPILE",
])
def test_a_variable_engines_are_tuned_with_passes(name):
    assert refusal("vllm", env={name: "1"}) is None


def test_a_variable_outside_the_tuning_families_says_which_are_taken():
    assert env_refusal("MY_SETTING").startswith("is not one of the variables engines are tuned with (CUDA_*, NCCL_*")
    assert env_refusal("LD_PRELOAD") == "loads a library into the engine ahead of its own, which runs anything"


# --- the docs ----------------------------------------------------------------------------------


def test_every_refused_flag_is_in_the_table_in_docs_engines_md():
    text = DOCS.read_text()
    missing = []
    for engine, (flags, _) in TABLES.items():
        section = re.search(rf"^### `{engine}`.*?(?=^### |\Z)", text, re.S | re.M)
        assert section, f"docs/engines.md has no section ### `{engine}`"
        for flag in flags:
            if f"`{flag.name}`" not in section.group(0):
                missing.append(f"{engine} {flag.name}")
    assert not missing, "docs/engines.md's refusal tables lack: " + ", ".join(missing)


def test_a_one_letter_flag_with_its_value_attached_is_read_as_that_flag():
    # argparse and `llmgw llama-server` read -m/etc/x as -m /etc/x.
    assert refusal("llamacpp", ["-m/etc/shadow"]) == (
        "args[0]: llamacpp may not be given -m/etc/shadow (llamacpp reads it as -m): it names the model's weights, "
        "which the agent gives from the model's source")
    assert refusal("llamacpp", ["-t8"]) is not None
    # A letter after it is a flag of llama.cpp's own: -fa is flash attention, not -f a.
    assert refusal("llamacpp", ["-fa", "on", "-tb", "4", "-ctk", "q8_0", "-mg", "0"]) is None


def test_a_beginning_that_fits_a_conditional_refusal_and_another_is_refused_by_the_other():
    flags = (refused("reads a file", "--chat-template", when=names_a_file), refused("runs code", "--chat-plugin"))
    with pytest.raises(engines.ProfileError) as refused_:
        check_args("e", ["--chat", "chatml"], flags, abbreviations=True)
    assert str(refused_.value) == "args[0]: e may not be given --chat (e reads it as --chat-plugin): it runs code"
    check_args("e", ["--chat-template", "chatml"], flags, abbreviations=True)
