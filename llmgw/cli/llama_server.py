"""`llmgw llama-server`: llama.cpp's server from PyPI, with llama-server's flags.

The agent runs the same thing without this command (the runner file in the
engine environment, see llmgw/engines/llamacpp_install.py); this is
for a person who wants to try a GGUF on a machine without llama-server, and
the same code the agent's engines run.
"""

from __future__ import annotations

import argparse
import os
import sys

from llmgw.engines import llamacpp_runner


def register(commands) -> None:
    p = commands.add_parser(
        "llama-server", help="run llama.cpp's server (the xllamacpp wheel, installed when missing) with "
                             "llama-server's flags",
        description="Serve a GGUF with llama.cpp's own server, as the agent does on a node without a "
                    "llama-server program: the xllamacpp wheel from PyPI, installed the first time into "
                    "DATA/engines/llamacpp-VERSION, with llama-server's flags below. Serves /health, "
                    "/v1/models, /v1/chat/completions (streamed or not), /v1/completions, /v1/embeddings "
                    "and /metrics until SIGINT or SIGTERM. docs/llamacpp.md has the details.",
        allow_abbrev=False)
    p.add_argument("--data-dir", metavar="DIR",
                   help="where the engine environment is kept (default: agent.yaml's data_dir, "
                        "/var/lib/llmgw-agent)")
    llamacpp_runner.add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import xllamacpp  # noqa: F401 - installed beside llmgw: serve from here
    except ImportError:
        pass
    else:
        return llamacpp_runner.serve(args)

    import asyncio

    from llmgw.config import AgentConfig
    from llmgw.engines import LlamaServerUnavailable, installed_llama_server

    data_dir = args.data_dir or AgentConfig().data_dir
    try:
        server = asyncio.run(installed_llama_server(
            data_dir, progress=lambda text: print(f"llmgw: {text}", file=sys.stderr, flush=True)))
    except LlamaServerUnavailable as e:
        print(f"llmgw: {e}", file=sys.stderr)
        return 1
    except PermissionError as e:
        print(f"llmgw: cannot write the engine environment under {data_dir}: {e.strerror}; "
              "give --data-dir a directory of yours", file=sys.stderr)
        return 1
    argv = server.argv_prefix + llamacpp_runner.to_argv(args)
    sys.stderr.flush()
    sys.stdout.flush()
    # The same process becomes the server: its PID is the one a supervisor
    # started and signals, with no llmgw left in between holding memory.
    os.execv(argv[0], argv)
    return 0  # not reached
