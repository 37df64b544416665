"""The `llmgw` command: one program, every part of the system as a subcommand.

Exit codes: 0 done, 1 refused (with a sentence saying why), 2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from llmgw import __version__


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own, with our prefix and exit code 2
        self.print_usage(sys.stderr)
        self.exit(2, f"llmgw: {message}\n")


def admin_options() -> argparse.ArgumentParser:
    """Options every command that talks to the admin API takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin", metavar="ADDR",
                        help="the admin API's address (default $LLMGW_ADMIN, else server.yaml's listen.admin, "
                             "else 127.0.0.1:9090)")
    common.add_argument("--token-file", metavar="PATH",
                        help="the admin token (default $LLMGW_TOKEN_FILE, else ./var/admin-token in a checkout, "
                             "else the one server.yaml names: admin-token in its data_dir, "
                             "/var/lib/llmgw/admin-token by default; server.yaml is $LLMGW_CONFIG or "
                             "/etc/llmgw/server.yaml)")
    common.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    return common


def build_parser() -> Parser:
    from llmgw.cli import agent, ctl, docs, doctor, keys, llama_server, server, sim

    parser = Parser(prog="llmgw", description="llmgw: your machines as one private, OpenAI-compatible LLM service.")
    parser.add_argument("--version", action="version", version=f"llmgw {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    common = admin_options()
    server.register(commands)
    agent.register(commands)
    ctl.register(commands, common)
    keys.register(commands, common)
    docs.register(commands)
    from llmgw.cli import node as node_cli

    node_cli.register(commands, common)
    doctor.register(commands)
    sim.register(commands)
    llama_server.register(commands)
    from llmgw.cli import unbuilt

    unbuilt.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from llmgw.cli.errors import explain

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        print("llmgw: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the last place an error can become a sentence
        sentence = explain(e)
        if sentence is None:
            if os.environ.get("LLMGW_DEBUG"):
                traceback.print_exc()
            sentence = (f"unexpected {type(e).__name__}: {e} (this is a bug in llmgw; "
                        "LLMGW_DEBUG=1 shows where)")
        print(f"llmgw: {sentence}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
