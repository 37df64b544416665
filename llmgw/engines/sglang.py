"""SGLang: safetensors checkpoints on NVIDIA GPUs, by tensor parallel over the shard's cards.

SGLang takes its API key only as --api-key, on a command line every user on
the node can read in /proc. So with a key the server is started through a
few lines of Python that read the agent's key file and hand the key to
SGLang's own entry point: the process's command line names the file, never
the key.
"""

from __future__ import annotations

import sys

from llmgw.engines import modelinfo, versions
from llmgw.engines.base import (
    Binary,
    Launch,
    check_common,
    check_trained_context,
    cuda_env,
    need_gpus,
    program,
)
from llmgw.engines.refusals import (
    CREDENTIAL,
    LISTENS,
    LOAD_FORMAT,
    LOADS_CODE,
    LOADS_FILE,
    LOGS_PROMPTS,
    MOVES_SOURCE,
    MOVES_TOKENIZER,
    PICKS_CARD,
    READS_CONFIG,
    RUNS_REPO_CODE,
    SENDS_ELSEWHERE,
    TLS_FILES,
    WRITES_FILES,
    Flag,
    check_args,
    check_env,
    names_a_file,
    refused,
    set_by_agent,
)
from llmgw.engines.vllm import REWRITES_CONFIG, SERVED_NAME, check_source, offline_env, safetensors_only
from llmgw.protocol import EngineProfile

MODULE = "sglang.launch_server"

# Run as `python -c KEYED KEY_FILE MODULE ARGS…`: the key joins SGLang's
# argv inside the process, where /proc/PID/cmdline does not show it.
KEYED = ("import runpy, sys\n"
         "key_file, module = sys.argv[1], sys.argv[2]\n"
         "with open(key_file) as f:\n"
         "    key = f.read().strip()\n"
         "sys.argv = [module] + sys.argv[3:] + ['--api-key', key]\n"
         "runpy.run_module(module, run_name='__main__', alter_sys=True)\n")

FLAGS: tuple[Flag, ...] = (
    refused(RUNS_REPO_CODE, "--trust-remote-code"),
    refused(MOVES_SOURCE, "--model-path", "--model"),
    refused(SERVED_NAME, "--served-model-name"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    set_by_agent("context_length", "--context-length"),
    set_by_agent("gpus", "--tp-size", "--tp", "--tensor-parallel-size"),
    refused(PICKS_CARD, "--base-gpu-id"),
    set_by_agent("slots", "--max-running-requests"),
    refused(CREDENTIAL, "--api-key"),
    refused(CREDENTIAL, "--admin-api-key"),
    refused(LOAD_FORMAT, "--load-format"),
    refused(WRITES_FILES, "--download-dir"),
    refused(WRITES_FILES, "--file-storage-path"),
    refused(WRITES_FILES, "--crash-dump-folder"),
    refused(WRITES_FILES, "--debug-tensor-dump-output-folder"),
    refused(READS_CONFIG, "--config"),
    refused(MOVES_TOKENIZER, "--tokenizer-path"),
    refused(REWRITES_CONFIG, "--json-model-override-args"),
    refused("passes the weights' loader settings, some of which name files", "--model-loader-extra-config"),
    refused(LOADS_CODE, "--custom-weight-loader"),
    refused("lets a request send Python code (a pickled logit processor) for the engine to run",
            "--enable-custom-logit-processor"),
    refused(LOADS_FILE, "--lora-paths"),
    refused(LOADS_FILE, "--speculative-draft-model-path"),
    refused(LOADS_FILE, "--debug-tensor-dump-input-file"),
    refused(LOADS_FILE, "--chat-template", when=names_a_file),
    refused(LOADS_FILE, "--completion-template", when=names_a_file),
    refused("joins other machines to the shard, which the agent neither started nor checked",
            "--dist-init-addr", "--nnodes", "--node-rank"),
    refused(SENDS_ELSEWHERE, "--otlp-traces-endpoint"),
    refused(SENDS_ELSEWHERE, "--tool-server"),
    refused(TLS_FILES, "--ssl-keyfile"),
    refused(TLS_FILES, "--ssl-certfile"),
    refused(LOGS_PROMPTS, "--log-requests"),
)


class SGLang:
    name = "sglang"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        check_source(self.name, profile)
        need_gpus(self.name, profile)
        check_args(self.name, profile.args, FLAGS, abbreviations=True)
        check_env(self.name, profile.env)
        if model_path:
            check_trained_context(profile, modelinfo.hf_context_length(model_path), f"{model_path}/config.json")

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`python -m sglang.launch_server …` with `binary` as the interpreter (default: the agent's own)."""
        self.validate(profile, model_path=model_path or None)
        python = program(binary, sys.executable, self.name, "engines.sglang")
        flags = ["--model-path", model_path, "--host", host, "--port", str(port),
                 "--served-model-name", profile.model, "--tp-size", str(len(profile.gpus)),
                 # The router reads each engine's load from its /metrics.
                 "--enable-metrics"]
        if profile.context_length:
            flags += ["--context-length", str(profile.context_length)]
        if profile.slots:
            flags += ["--max-running-requests", str(profile.slots)]
        flags += safetensors_only(profile, model_path)
        if profile.role == "embedding":
            flags += ["--is-embedding"]
        flags += list(profile.args)
        argv = python + (["-c", KEYED, api_key_file, MODULE] if api_key_file else ["-m", MODULE]) + flags
        return Launch(argv=argv, env={**offline_env(model_path), **profile.env, **cuda_env(profile)},
                      health_path="/health", model=profile.model, metrics_path="/metrics")

    def installed(self, binary: Binary = None) -> str | None:
        python = program(binary, sys.executable, self.name)[0]
        if versions.which(python) is None:
            return None
        return versions.module_version("sglang", "sglang", python)
