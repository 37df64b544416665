"""`llmgw strata-serve`: what the agent starts for a Strata replica (llmgw/engines/strata_serve.py)."""

from __future__ import annotations

import argparse


def register(commands) -> None:
    p = commands.add_parser(
        "strata-serve", help="prepare a Strata model with Strata's setup, then become Strata's server (the agent "
                             "starts it for a model whose engine is strata)",
        description="Prepare a model with Strata's own setup on its fetched GGUF files, then become Strata's "
                    "server (the same process, so whoever started it signals the server). Relative --state and "
                    "--data are under $HOME, the engine user's home. The server's API key is read from "
                    "STRATA_API_KEY in the environment, never from a command line. Arguments after -- go to "
                    "Strata's setup (--family, --size, --context, …). docs/engines.md#strata has the details.",
        allow_abbrev=False)
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="where Strata's server listens")
    p.add_argument("--model", required=True, metavar="NAME",
                   help="the name the model is served under, which /v1/models lists")
    p.add_argument("--weights", required=True, metavar="PATH",
                   help="the model's GGUF files: their directory, or one of them")
    p.add_argument("--state", required=True, metavar="DIR",
                   help="this replica's own directory: setup's output, the server's config and logs")
    p.add_argument("--data", required=True, metavar="DIR",
                   help="shared by the node's replicas: the prepared models and their draft layers")
    p.add_argument("--python", required=True, metavar="PATH", help="the interpreter of Strata's environment")
    p.add_argument("--strata", required=True, metavar="DIR", help="Strata's source directory, where setup.py is")
    p.add_argument("--engine", required=True, metavar="DIR",
                   help="the directory of Strata's prebuilt engine, where its strata program is")
    p.add_argument("setup_args", nargs="*", metavar="-- SETUP_ARG",
                   help="given to Strata's setup: --family, --size, --context, --parallel, …")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from llmgw.engines import StrataPlan, parse_listen, serve_strata

    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        print(f"llmgw: strata-serve: --listen: {e}", file=sys.stderr)
        return 2
    return serve_strata(StrataPlan(host=host, port=port, model=args.model, weights=args.weights, state=args.state,
                      data=args.data, python=args.python, strata=args.strata, engine=args.engine,
                      setup_args=list(args.setup_args)))
