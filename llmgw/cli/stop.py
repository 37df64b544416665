"""`llmgw stop`: stop everything an install started on this machine (llmgw.onboard.stopping)."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.output import emit_json


def register(commands) -> None:
    stop = commands.add_parser(
        "stop", help="stop everything an install started here: the agent, its engines, the control plane",
        description="Stop what `llmgw server init --install` (or the setup screens) started on this machine: "
                    "the agent, then the engines it runs (which outlive an agent that stops, by design, so "
                    "that a restarted agent adopts them), then the control plane and, for an install into a "
                    "directory of three machines, the store's services. Nothing is removed: `llmgw server init "
                    "--install` with the same flags starts it again. docs/setup.md.")
    stop.add_argument("--root", default="/",
                      help="the install's root directory, as given to server init --install (default /)")
    stop.add_argument("--services", choices=("systemd", "supervised"),
                      help="how its services run (default: systemd on a real machine, supervised otherwise)")
    stop.add_argument("--json", action="store_true", help="print one JSON document of what was stopped")
    stop.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llmgw.onboard import Layout, StepFailed, Stopped, service_manager, stop_install

    layout = Layout(Path(args.root))
    if not layout.etc.is_dir():
        print(f"llmgw: nothing of llmgw is installed under {layout.root} (there is no {layout.etc}); give the "
              "--root the install was made with", file=sys.stderr)
        return 1

    def said(item: Stopped) -> None:
        if not args.json:
            print(f"{item.what}: {item.sentence}" + (f" (pid {item.pid})" if item.pid else ""), flush=True)
    try:
        stopped = stop_install(layout, service_manager(layout, args.services), said)
    except StepFailed as e:
        print(f"llmgw: {e.sentence}", file=sys.stderr)
        return 1
    except PermissionError:
        # The install's processes are root's (or the installer's): another user may not signal them.
        print(f"llmgw: this user may not stop what the install under {layout.root} started; run it as the "
              f"user that installed it (sudo llmgw stop --root {layout.root})", file=sys.stderr)
        return 1
    if args.json:
        emit_json({"root": str(layout.root), "stopped": [{"what": s.what, "pid": s.pid} for s in stopped]})
    elif not stopped:
        print(f"nothing of the install under {layout.root} was running")
    return 0
