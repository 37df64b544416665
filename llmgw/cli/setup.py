"""`llmgw setup`: the setup screens, whatever is installed (`sudo llmgw` opens them on a bare machine)."""

from __future__ import annotations


def register(commands) -> None:
    from llmgw.onboard import LISTEN_DEFAULTS

    setup = commands.add_parser(
        "setup", help="the setup screens: install a control plane on this machine (or three)",
        description="The screens `sudo llmgw` opens on a machine with nothing installed: one machine or "
                    "three, the parts of an install, the checks, the plan, the install and its end. "
                    "`llmgw server init --install` does the same from a script.")
    setup.add_argument("--root", metavar="DIR", help="install under DIR instead of / (a test, a trial run)")
    setup.add_argument("--services", choices=("systemd", "supervised"),
                       help="how the services are run (default: systemd on a real machine, else supervised)")
    setup.add_argument("--admin-email", metavar="EMAIL", help="the first administrator's e-mail, "
                       "to start the screens with (default admin@localhost)")
    for role, default in LISTEN_DEFAULTS.items():
        setup.add_argument(f"--listen-{role}", metavar="ADDR", help=f"the {role} listener (default {default})")
    setup.set_defaults(run=run)


def run(args) -> int:
    from llmgw.console import run_setup

    return run_setup(args)
