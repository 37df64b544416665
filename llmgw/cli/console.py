"""`llmgw console` (and `llmgw` with no command): the console, the node's overview or the setup screens."""

from __future__ import annotations


def add_options(parser) -> None:
    parser.add_argument("--config", metavar="PATH",
                        help="a control plane's server.yaml: open its console (default /etc/llmgw/server.yaml)")
    parser.add_argument("--admin", metavar="ADDR", help="the admin API's address (default: server.yaml's)")
    parser.add_argument("--admin-token-file", metavar="PATH",
                        help="the admin token (default: the one server.yaml names)")
    parser.add_argument("--agent-config", metavar="PATH",
                        help="a node's agent.yaml: open the node's overview (default /etc/llmgw/agent.yaml)")


def register(commands) -> None:
    p = commands.add_parser(
        "console", help="the console (control plane), the node's overview (node) or setup (a new machine)",
        description="What `sudo llmgw` with no command opens: on a control plane the console (a client of the "
                    "admin API), on a node the node's overview (read on the machine, no token), on a machine "
                    "with neither the setup screens. Needs a terminal. docs/console.md shows each screen.")
    add_options(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from llmgw.console import run as open_console

    return open_console(args)
