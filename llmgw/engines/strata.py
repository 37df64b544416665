"""Strata: a few mixture-of-experts models from RAM and one card, prepared from their GGUF files on the node.

Strata runs only the families its setup knows, each prepared on the node
before it serves, so the agent starts `llmgw strata-serve`, which runs
Strata's setup on the fetched weights and then becomes Strata's server. The
profile's args go to that setup (--family, --size, …), after a `--`.

`binary` says where Strata is, in one of two ways: the interpreter of an
environment laid out as the Go original's installer made it (<env>/bin/python,
with Strata's source in <env>/strata and its prebuilt engine in
<env>/strata-engine); or, for a Strata installed by hand and named in
agent.yaml (engines.strata), the three parts themselves: (interpreter,
source directory, engine directory).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from llmgw.engines import versions
from llmgw.engines.base import (
    Binary,
    EngineError,
    Launch,
    ProfileError,
    check_common,
    cuda_env,
    join_host_port,
    need_gpus,
    read_key,
)
from llmgw.engines.refusals import (
    CREDENTIAL,
    DOWNLOADS,
    LISTENS,
    LOADS_FILE,
    MOVES_SOURCE,
    PICKS_CARD,
    Flag,
    check_args,
    check_env,
    refused,
    set_by_agent,
)
from llmgw.protocol import EngineProfile

SOURCE_DIR = "strata"
ENGINE_DIR = "strata-engine"
_AGENT_SETS = "is set by llmgw strata-serve, which prepares the model where the agent says"
_ENGINE = "changes the engine the agent installed and checked"

FLAGS: tuple[Flag, ...] = (
    refused(MOVES_SOURCE, "--gguf-dir", "--gguf"),
    refused("is the size in Strata's setup, written --size in a profile: --model names the weights everywhere else",
            "--model"),
    refused(_AGENT_SETS, "--models-dir"),
    refused(_AGENT_SETS, "--data-dir"),
    refused("moves prepared models' files elsewhere on the node", "--move-data"),
    refused("writes Strata's settings for every later run on the node", "--set-default-data-dir"),
    refused(DOWNLOADS, "--feed"),
    refused(DOWNLOADS, "--update"),
    refused(DOWNLOADS, "--source"),
    refused(_ENGINE, "--prebuilt"),
    refused(_ENGINE, "--build"),
    refused(_ENGINE, "--rollback-engine"),
    refused(LOADS_FILE, "--dsv41-package"),
    refused("reads another repository or path than the model's", "--inspect"),
    refused("runs Strata's interactive setup, which is not a server", "--setup"),
    refused("opens a browser on the node", "--browser"),
    refused(PICKS_CARD, "--gpu", "--gpus", "--gpu-roles"),
    refused(_AGENT_SETS, "--backend"),
    refused("changes which models and cards Strata's setup refuses", "--experimental-speed-projection"),
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    refused(LISTENS, "--listen"),
    refused(CREDENTIAL, "--api-key"),
    set_by_agent("context_length", "--context"),
    set_by_agent("slots", "--parallel"),
)


def _value(args: list[str], flag: str) -> str:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return ""


def layout(python: str) -> tuple[Path, Path]:
    """Strata's source and engine directories in the environment whose interpreter is `python`."""
    env = Path(python).parent.parent
    return env / SOURCE_DIR, env / ENGINE_DIR


def locate(binary: Binary) -> tuple[str, Path, Path] | None:
    """(interpreter, source directory, engine directory) from what the agent names; None when it names nothing."""
    if isinstance(binary, str):
        if not binary:
            return None
        source, engine = layout(binary)
        return binary, source, engine
    if isinstance(binary, Sequence) and len(binary) == 3 and all(isinstance(p, str) and p for p in binary):
        return binary[0], Path(binary[1]), Path(binary[2])
    return None


class Strata:
    name = "strata"
    needs_weights = True

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        need_gpus(self.name, profile, most=1)
        check_args(self.name, profile.args, FLAGS, abbreviations=True)
        for flag in ("--family", "--size"):
            if not _value(profile.args, flag):
                raise ProfileError("args", f"strata prepares a model by its family and size, and {flag} is missing "
                                           "(e.g. --family qwen --size IQ2_XS)")
        check_env(self.name, profile.env)

    def command(self, profile: EngineProfile, *, model_path: str, port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        self.validate(profile)
        found = locate(binary)
        if found is None:
            raise EngineError("strata: no Strata is installed on this node; name yours in agent.yaml "
                              "(engines.strata.dir)")
        python, source, engine = found
        # Relative to the engine user's home, which strata-serve resolves
        # them against ($HOME as the supervisor sets it), so they are the
        # engine's to write. The data (a prepared model and its draft layer,
        # gigabytes) is the same for every replica of a model, so it is
        # shared; the state is the shard's own.
        state = shard_id or f"{profile.model}-{port}"
        # An agent run from llmgw.pyz has no llmgw for `-m` to find: the archive is the program, as for the sim.
        pyz = os.environ.get("LLMGW_PYZ")
        argv = [sys.executable, *([pyz] if pyz else ["-m", "llmgw"]), "strata-serve",
                "--listen", join_host_port(host, port), "--model", profile.model, "--weights", model_path,
                "--state", str(Path("strata") / state), "--data", str(Path("strata") / "data"),
                "--python", python, "--strata", str(source), "--engine", str(engine), "--"]
        if profile.context_length:
            # Left out, Strata's setup picks its own (4096 on one node) while
            # the catalog says the model's whole context.
            argv += ["--context", str(profile.context_length)]
        if profile.slots:
            argv += ["--parallel", str(profile.slots)]
        argv += list(profile.args)
        env = {**profile.env, **cuda_env(profile)}
        if api_key_file:
            # Strata's server reads its key from here, and strata-serve hands
            # it on the same way: not on a command line.
            env["STRATA_API_KEY"] = read_key(api_key_file, self.name)
        return Launch(argv=argv, env=env, health_path="/health", model=profile.model,
                      # Its /metrics is JSON for its own monitor unless asked for Prometheus' text.
                      metrics_path="/metrics?format=prometheus")

    def installed(self, binary: Binary = None) -> str | None:
        """Strata's version as its source states it, when the environment is whole: setup, server, engine."""
        found = locate(binary)
        if found is None or versions.which(found[0]) is None:
            return None
        _, source, engine = found
        for part in (source / "setup.py", source / "serve" / "server.py", engine / "strata"):
            if not part.exists():
                return None
        try:
            text = (source / "strata_cli" / "__init__.py").read_text(encoding="utf-8")
        except OSError:
            return versions.UNKNOWN
        m = re.search(r'PRODUCT_VERSION\s*=\s*"([^"]+)"', text)
        return m.group(1) if m else versions.UNKNOWN
