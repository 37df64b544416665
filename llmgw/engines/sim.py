"""llmgw's own sim-engine: an OpenAI-compatible engine that answers at a set speed, for tests and benches.

It needs no weights and no card, and it is the one engine every node can
run, so it is what proves a node end to end.
"""

from __future__ import annotations

import os
import sys

import llmgw
from llmgw.engines.base import Binary, Launch, ProfileError, check_common, loopback_port, program
from llmgw.engines.kvevents import kv_events_flag
from llmgw.engines.refusals import (
    KV_EVENTS,
    LISTENS,
    LOADS_FILE,
    Flag,
    check_args,
    check_env,
    refused,
    set_by_agent,
)
from llmgw.protocol import EngineProfile

# The sim's --embedding-model takes a sentence-transformers folder, or the
# one model it knows by name from a package.
_KNOWN_EMBEDDER = "all-MiniLM-L6-v2"

FLAGS: tuple[Flag, ...] = (
    refused(LISTENS, "--host"),
    refused(LISTENS, "--port"),
    refused("is the name the model is served under, the catalog's, which the router asks for", "--model"),
    set_by_agent("context_length", "--context-length"),
    refused(LOADS_FILE, "--embedding-model", when=lambda v: v.strip() != _KNOWN_EMBEDDER),
    refused(KV_EVENTS, "--kv-events-config"),
)


class Sim:
    name = "sim"
    needs_weights = False

    def validate(self, profile: EngineProfile, *, model_path: str | None = None) -> None:
        check_common(self.name, profile)
        if profile.gpus:
            raise ProfileError("gpus", "sim needs no GPU; a card named here would be held for nothing (gpus: [])")
        check_args(self.name, profile.args, FLAGS, abbreviations=True)
        check_env(self.name, profile.env)

    def command(self, profile: EngineProfile, *, model_path: str = "", port: int, host: str,
                api_key_file: str | None = None, binary: Binary = None, shard_id: str = "") -> Launch:
        """`python -m llmgw sim-engine`, with the agent's own interpreter unless `binary` names another.

        sim-engine takes keys only on its command line (--api-key), which
        every user on the node can read, so an agent's key file is not
        passed on: the sim answers anyone who reaches it, as a test engine.
        """
        self.validate(profile)
        argv = program(binary, sys.executable, self.name)
        # An agent run from llmgw.pyz has no llmgw for `-m` to find: the archive is the program
        # ($LLMGW_PYZ, which its bootstrap sets), as the control plane's workers are started.
        pyz = os.environ.get("LLMGW_PYZ") if binary is None else None
        argv += [pyz] if pyz else ["-m", "llmgw"]
        argv += ["sim-engine", "--host", host, "--port", str(port), "--model", profile.model]
        if profile.context_length:
            argv += ["--context-length", str(profile.context_length)]
        argv += list(profile.args)
        kv_events = ""
        if any(a == "--tokenizer" or a.startswith("--tokenizer=") for a in profile.args):
            # A sim keeping a prefix cache publishes its events as vLLM does, to the agent (docs/routing.md).
            kv_port = loopback_port()
            argv += ["--kv-events-config", kv_events_flag(kv_port)]
            kv_events = f"tcp://127.0.0.1:{kv_port}"
        return Launch(argv=argv, env=dict(profile.env), health_path="/health", model=profile.model,
                      metrics_path="/metrics", kv_events=kv_events)

    def installed(self, binary: Binary = None) -> str | None:
        return llmgw.__version__
