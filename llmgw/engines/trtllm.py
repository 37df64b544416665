"""TensorRT-LLM's OpenAI server, trtllm-serve: checkpoints on NVIDIA GPUs, by tensor parallel.

Not installed by llmgw: a node runs the one its operator installed. Its
flags are click's, spelt with `_` (`--tp_size`) and taken only whole, so a
beginning of a flag is not refused — click refuses it itself. It has no API
key: a TensorRT-LLM shard answers whoever reaches its port, so it belongs on
a network only the control planes reach.
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
    need_gpus,
    program,
)
from llmgw.engines.refusals import (
    LISTENS,
    LOADS_CODE,
    MOVES_TOKENIZER,
    READS_CONFIG,
    RUNS_REPO_CODE,
    SENDS_ELSEWHERE,
    Flag,
    check_args,
    check_env,
    refused,
    set_by_agent,
)
from llmgw.engines.vllm import SERVED_NAME, check_source
from llmgw.protocol import EngineProfile

FLAGS: tuple[Flag, ...] = (
    refused(RUNS_REPO_CODE, "--trust_remote_code"),
    refused(MOVES_TOKENIZER, "--tokenizer"),
    refused(LOADS_CODE, "--custom_tokenizer", when=lambda v: "." in v),
    refused(READS_CONFIG, "--extra_llm_api_options", "--config"),
    refused(SENDS_ELSEWHERE, "--metadata_server_config_file"),
    refused(SENDS_ELSEWHERE, "--otlp_traces_endpoint"),
    refused(SERVED_NAME, "--served_model_name"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    set_by_agent("gpus", "--tp_size"),
    set_by_agent("context_length", "--max_seq_len"),
    set_by_agent("slots", "--max_batch_size"),
)


class TRTLLM:
    name = "trtllm"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        check_source(self.name, profile)
        # TensorRT-LLM has no way to be told safetensors only: given a
        # Hugging Face id it downloads the repository and reads what it
        # finds, pickles included.
        if modelinfo.hub_id(profile.source) and not profile.allow_pickle:
            raise ProfileError(
                "source", f"trtllm downloads {profile.source} itself and may load its pickle files, which run code; "
                          "give the checkpoint the agent fetches (hf:org/repo/… or the mirror), or set allow_pickle "
                          "if the repository was checked")
        need_gpus(self.name, profile)
        check_args(self.name, profile.args, FLAGS, abbreviations=False)
        check_env(self.name, profile.env)
        if model_path:
            check_trained_context(profile, modelinfo.hf_context_length(model_path), f"{model_path}/config.json")

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`trtllm-serve MODEL …` on the PyTorch backend, which reads a Hugging Face checkpoint as it is.

        --served_model_name is TensorRT-LLM 1.0's; earlier ones list the
        model by its path. It serves no key (api_key_file is not used).
        """
        self.validate(profile, model_path=model_path or None)
        argv = program(binary, "trtllm-serve", self.name, "engines.trtllm")
        argv += [model_path, "--host", host, "--port", str(port), "--backend", "pytorch",
                 "--tp_size", str(len(profile.gpus)), "--served_model_name", profile.model]
        if profile.context_length:
            argv += ["--max_seq_len", str(profile.context_length)]
        if profile.slots:
            argv += ["--max_batch_size", str(profile.slots)]
        argv += list(profile.args)
        # Its /metrics is JSON of iteration statistics, not Prometheus' text.
        return Launch(argv=argv, env={**profile.env, **cuda_env(profile)}, health_path="/health",
                      model=profile.model, metrics_path="")

    def installed(self, binary: Binary = None) -> str | None:
        start = program(binary, "trtllm-serve", self.name)
        path = versions.which(start[0])
        if path is None:
            return None
        python = versions.script_python(path)
        return versions.module_version("tensorrt_llm", "tensorrt_llm", python) if python else versions.UNKNOWN
