"""FreeToken: mixture-of-experts models larger than a card, from RAM and one card of compute capability 8.0+.

It reads Hugging Face safetensors checkpoints as published (FP8, NVFP4,
MXFP4, BF16) and compiles some of its kernels the first time a model loads,
with the CUDA 13 toolkit — so a node without one says so here rather than
starting an engine that fails on its first model. Its card is the shard's,
pinned by CUDA_VISIBLE_DEVICES, so it is device 0 to FreeToken; its key is
given in FREETOKEN_API_KEY, where it reads it, not on a command line.
"""

from __future__ import annotations

import glob
import json
import os
import re

from llmgw.engines import modelinfo, versions
from llmgw.engines.base import (
    Binary,
    EngineError,
    Launch,
    check_common,
    check_trained_context,
    cuda_env,
    need_gpus,
    program,
    read_key,
)
from llmgw.engines.refusals import (
    CREDENTIAL,
    LISTENS,
    LOADS_FILE,
    MOVES_SOURCE,
    PICKS_CARD,
    RUNS_REPO_CODE,
    Flag,
    check_args,
    check_env,
    refused,
    set_by_agent,
)
from llmgw.engines.vllm import REWRITES_CONFIG, SERVED_NAME, check_source
from llmgw.protocol import EngineProfile

FLAGS: tuple[Flag, ...] = (
    refused(RUNS_REPO_CODE, "--trust-remote-code"),
    refused(MOVES_SOURCE, "--model"),
    refused(SERVED_NAME, "--served-model-name"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    refused(PICKS_CARD, "--gpu"),
    refused(CREDENTIAL, "--api-key"),
    set_by_agent("context_length", "--max-seq-len-override"),
    set_by_agent("slots", "--max-running-requests"),
    refused(LOADS_FILE, "--mmproj"),
    refused(LOADS_FILE, "--mm-encoder-weights"),
    refused("reads a profile file of the node's", "--moe-cache-split"),
    refused("serves the node's local files to requests", "--allowed-local-media-path"),
    refused("lets requests have the engine fetch from those sites", "--allowed-media-domains"),
    refused(REWRITES_CONFIG, "--hf-overrides"),
)


def _major(toolkit: str) -> int:
    try:
        with open(os.path.join(toolkit, "version.json"), encoding="utf-8") as f:
            return int(str(json.load(f)["cuda"]["version"]).split(".")[0])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    m = re.search(r"cuda-(\d+)", os.path.basename(os.path.realpath(toolkit)))
    return int(m.group(1)) if m else 0


def cuda_toolkit(major: int = 13) -> str:
    """A CUDA toolkit of that major version with nvcc, from CUDA_HOME, /usr/local/cuda or /usr/local/cuda-13.*.

    "" when there is none.
    """
    candidates = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    candidates += sorted(glob.glob(f"/usr/local/cuda-{major}.*"), reverse=True)
    for toolkit in candidates:
        if toolkit and os.access(os.path.join(toolkit, "bin", "nvcc"), os.X_OK) and _major(toolkit) == major:
            return toolkit
    return ""


class FreeToken:
    name = "freetoken"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        check_source(self.name, profile)
        need_gpus(self.name, profile, most=1)
        check_args(self.name, profile.args, FLAGS, abbreviations=True)
        check_env(self.name, profile.env)
        if model_path:
            check_trained_context(profile, modelinfo.hf_context_length(model_path), f"{model_path}/config.json")

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`ft serve --model PATH …` with `binary` as ft in the environment FreeToken was installed into."""
        self.validate(profile, model_path=model_path or None)
        start = program(binary, "ft", self.name, "engines.freetoken")
        toolkit = cuda_toolkit()
        if not toolkit:
            raise EngineError("freetoken compiles its kernels on first start and this node has no CUDA 13 toolkit "
                              "(nvcc in CUDA_HOME, /usr/local/cuda or /usr/local/cuda-13.*)")
        argv = start + ["serve", "--model", model_path, "--host", host, "--port", str(port), "--gpu", "0",
                        "--served-model-name", profile.model]
        if profile.context_length:
            argv += ["--max-seq-len-override", str(profile.context_length)]
        if profile.slots:
            argv += ["--max-running-requests", str(profile.slots)]
        argv += list(profile.args)
        env = {**profile.env, **cuda_env(profile), "CUDA_HOME": toolkit}
        # nvcc for the kernels it compiles, and its environment's own bin
        # first, where ninja is.
        path = [os.path.join(toolkit, "bin"), os.environ.get("PATH", "/usr/bin:/bin")]
        if os.sep in start[0]:
            path.insert(0, os.path.dirname(start[0]))
        env["PATH"] = ":".join(path)
        if api_key_file:
            env["FREETOKEN_API_KEY"] = read_key(api_key_file, self.name)
        # /health answers 200 while loading, saying so in its body (readiness
        # waits that out); it serves numbers as JSON, not Prometheus' text.
        return Launch(argv=argv, env=env, health_path="/health", model=profile.model, metrics_path="")

    def installed(self, binary: Binary = None) -> str | None:
        start = program(binary, "ft", self.name)
        path = versions.which(start[0])
        if path is None:
            return None
        said = versions.output([path, *start[1:], "--version"])  # "freetoken version 0.2.1"
        # `ft` is a short name: another program by it on PATH is not FreeToken.
        if said is None or "freetoken" not in said.lower():
            return None
        return said.split()[-1]
