"""`llmgw onboard …`: the program's own half of an install, run on the machine being installed.

Hidden from --help and docs/cli.md: people run `llmgw node add --ssh` (or
`server add --ssh`, `mirror add-peer`), which copies this program to the
machine and runs these there.
"""

from __future__ import annotations

import argparse


def register(commands) -> None:
    onboard = commands.add_parser("onboard", description="The machine's half of an install (run by llmgw itself).")
    onboard.hidden = True  # docs cli leaves it out
    sub = onboard.add_subparsers(dest="onboard_command", metavar="COMMAND")
    supervise = sub.add_parser("supervise", description="Start UNIT under a detached supervisor (the supervised "
                                                        "service manager) and return once it runs.")
    supervise.add_argument("--root", default="/", help="the install's root directory")
    supervise.add_argument("unit", help="the unit file's name, e.g. llmgw-agent.service")
    supervise.set_defaults(run=run_supervise)
    node = sub.add_parser("node", description="Install this machine as a node: the plan (JSON, with the join code) "
                                              "on stdin, progress as JSON lines on stdout. Run as root.")
    node.add_argument("--root", default="/", help="the install's root directory")
    node.set_defaults(run=run_node)
    server = sub.add_parser("server", description="Install this machine as a standby control plane: the plan "
                                                  "(JSON, with the store and master key) on stdin, progress as "
                                                  "JSON lines on stdout. Run as root.")
    server.add_argument("--root", default="/", help="the install's root directory")
    server.set_defaults(run=run_server)
    for name, what in (("mirror-key", "Make this machine's model mirror key and print a certificate request for "
                                       "it"),
                       ("mirror", "Install this machine's model mirror with the certificate in the plan")):
        mirror = sub.add_parser(name, description=f"{what}: the plan (JSON) on stdin, progress as JSON lines on "
                                                  "stdout. Run as root, by llmgw mirror add-peer.")
        mirror.add_argument("--root", default="/", help="the install's root directory")
        mirror.set_defaults(run=run_mirror)
    store = sub.add_parser("store", description="Make this machine one of the three-machine store's: the plan "
                                                "(JSON, with the store's passwords) on stdin, progress as JSON "
                                                "lines on stdout. Run as root.")
    store.add_argument("--root", default="/", help="the install's root directory")
    store.set_defaults(run=run_store)


def run_supervise(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llmgw.onboard import Layout, detach

    return detach(Layout(Path(args.root)), args.unit)


def run_node(args: argparse.Namespace) -> int:
    from llmgw.onboard import machine

    return machine.main(args.root)


def run_server(args: argparse.Namespace) -> int:
    from llmgw.onboard import standby

    return standby.main(args.root)


def run_mirror(args: argparse.Namespace) -> int:
    from llmgw.onboard import onboard_mirror

    return onboard_mirror(args.root, args.onboard_command)


def run_store(args: argparse.Namespace) -> int:
    from llmgw.onboard import hastore

    return hastore.main(args.root)
