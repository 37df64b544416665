"""llama.cpp's server, llama-server: GGUF models on CPUs and GPUs.

Its flags are matched as written: llama.cpp's parser takes no beginnings of
a flag, and its short spellings (-m, -hf, -mu) are flags of their own, so
each is listed with its long one.
"""

from __future__ import annotations

from pathlib import Path

from llmgw.engines import modelinfo, versions
from llmgw.engines.base import (
    Binary,
    Launch,
    ProfileError,
    check_common,
    check_trained_context,
    cuda_env,
    program,
)
from llmgw.engines.refusals import (
    CREDENTIAL,
    DOWNLOADS,
    LISTENS,
    LOADS_FILE,
    MOVES_SOURCE,
    SENDS_ELSEWHERE,
    SERVES_FILES,
    TLS_FILES,
    WRITES_FILES,
    Flag,
    check_args,
    check_env,
    refused,
    set_by_agent,
)
from llmgw.protocol import EngineProfile

FLAGS: tuple[Flag, ...] = (
    refused(MOVES_SOURCE, "--model", "-m"),
    refused("is the name the model is served under, the catalog's, which the router asks for", "--alias", "-a"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    set_by_agent("context_length and slots", "--ctx-size", "-c"),
    set_by_agent("slots", "--parallel", "-np"),
    set_by_agent("cpu_cores", "--threads", "-t"),
    refused(CREDENTIAL, "--api-key"),
    refused("is the agent's own key file, given when the shard has a key", "--api-key-file"),
    refused(DOWNLOADS, "--model-url", "-mu"),
    refused(DOWNLOADS, "--hf-repo", "-hf", "-hfr"),
    refused(DOWNLOADS, "--hf-file", "-hff"),
    refused(DOWNLOADS, "--hf-repo-draft", "-hfd", "-hfrd"),
    refused(DOWNLOADS, "--hf-repo-v", "-hfv"),
    refused(DOWNLOADS, "--hf-file-v", "-hffv"),
    refused(DOWNLOADS, "--mmproj-url", "-mmu"),
    refused(DOWNLOADS, "--docker-repo", "-dr"),
    refused(CREDENTIAL, "--hf-token", "-hft"),
    refused(LOADS_FILE, "--lora"),
    refused(LOADS_FILE, "--lora-scaled"),
    refused(LOADS_FILE, "--control-vector"),
    refused(LOADS_FILE, "--control-vector-scaled"),
    refused(LOADS_FILE, "--model-draft", "-md"),
    refused(LOADS_FILE, "--mmproj", "-mm"),
    refused(LOADS_FILE, "--model-vocoder", "-mv"),
    refused(LOADS_FILE, "--chat-template-file"),
    refused(LOADS_FILE, "--json-schema-file", "-jf"),
    refused(LOADS_FILE, "--grammar-file"),
    refused(LOADS_FILE, "--system-prompt-file", "-spf"),
    refused(LOADS_FILE, "--file", "-f"),
    refused(LOADS_FILE, "--lookup-cache-static", "-lcs"),
    refused(LOADS_FILE, "--lookup-cache-dynamic", "-lcd"),
    refused(LOADS_FILE, "--models-dir"),
    refused(LOADS_FILE, "--models-preset"),
    refused(WRITES_FILES, "--log-file"),
    refused(WRITES_FILES, "--slot-save-path"),
    refused(WRITES_FILES, "--prompt-cache"),
    refused(WRITES_FILES, "--logdir"),
    refused(SERVES_FILES, "--path"),
    refused(SERVES_FILES, "--media-path"),
    refused(TLS_FILES, "--ssl-key-file"),
    refused(TLS_FILES, "--ssl-cert-file"),
    refused(SENDS_ELSEWHERE, "--rpc"),
)

# A judge is asked about each prompt once, so llama.cpp's prompt cache only
# grows: one judge's reached 3.2 GB of RAM beside a 1.6 GB model.
JUDGE_FLAGS: tuple[Flag, ...] = (
    refused("is 0 for a judge, given by the agent: a judge's prompts are each new, and the prompt cache only "
            "grows (one judge's reached 3.2 GB)", "--cache-ram", "-cram"),
)


class LlamaCpp:
    name = "llamacpp"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        if profile.files:
            if not any(modelinfo.is_gguf(name) for name in profile.files):
                raise ProfileError("files", "llama.cpp reads GGUF files, and the set names none (a .gguf)")
        elif not modelinfo.is_gguf(profile.source):
            got = f"{profile.source!r}" if profile.source else "nothing"
            raise ProfileError("source", f"llama.cpp reads a GGUF file (.gguf); the source names {got}")
        check_args(self.name, profile.args, FLAGS, abbreviations=False)
        if profile.role == "judge":
            check_args(self.name, profile.args, JUDGE_FLAGS, abbreviations=False)
        check_env(self.name, profile.env)
        if model_path:
            path = modelinfo.gguf_path(model_path)
            if path is not None:
                with open(path, "rb") as f:
                    if f.read(4) != b"GGUF":
                        raise ProfileError("source", f"{path} is not a GGUF file (it does not begin with GGUF)")
                check_trained_context(profile, modelinfo.gguf_context_length(model_path), Path(path).name)

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        self.validate(profile, model_path=model_path or None)
        # llama-server splits --ctx-size among its slots, so a request's
        # context_length is had only with slots times as many.
        slots = profile.slots or 1
        argv = program(binary, "llama-server", self.name, "engines.llamacpp.binary")
        argv += ["--model", model_path, "--host", host, "--port", str(port), "--alias", profile.model]
        if profile.context_length:
            argv += ["--ctx-size", str(profile.context_length * slots)]
        argv += ["--parallel", str(slots)]
        if profile.cpu_cores:
            argv += ["--threads", str(profile.cpu_cores)]
        argv += ["--metrics"]
        # Every layer on the shard's cards, or none: with no GPUs the model
        # must not land on a card another shard holds, whatever the build
        # (CUDA_VISIBLE_DEVICES hides cards from CUDA builds only).
        argv += ["-ngl", "999" if profile.gpus else "0"]
        if profile.role == "judge":
            argv += ["--cache-ram", "0"]
        if profile.role == "embedding":
            argv += ["--embeddings"]
            if profile.context_length:
                # An embedding model reads a whole passage in one batch; with
                # the default 512 a 516-token chunk failed.
                argv += ["--batch-size", str(profile.context_length), "--ubatch-size", str(profile.context_length)]
        if api_key_file:
            argv += ["--api-key-file", api_key_file]
        argv += list(profile.args)
        return Launch(argv=argv, env={**profile.env, **cuda_env(profile)}, health_path="/health",
                      model=profile.model, metrics_path="/metrics")

    def installed(self, binary: Binary = None) -> str | None:
        argv = program(binary, "llama-server", self.name)
        found = versions.which(argv[0])
        if found is None:
            return None
        # A binary that is there but does not run (a library missing) cannot serve either.
        return versions.said_version(versions.output([found, *argv[1:], "--version"]))

