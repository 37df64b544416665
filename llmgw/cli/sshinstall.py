"""`llmgw node add --ssh`: the CLI's face of onboard/nodeadd.py: secrets read, progress printed."""

from __future__ import annotations

import asyncio
import getpass
import sys
from pathlib import Path

from llmgw.cli.output import emit_json
from llmgw.onboard.nodeadd import NodeAdd, add_node, program_file
from llmgw.onboard.ssh import Credentials, Target
from llmgw.onboard.steps import Progress


def read_secret(prompt: str) -> str:
    """From the terminal without echo, else one line of stdin: never from argv or the environment."""
    if sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(f"llmgw: {prompt.rstrip(': ')} was asked for, and stdin ended first")
    return line.rstrip("\n")


def run_node_add_ssh(args, admin) -> int:
    if args.root and args.services == "systemd":
        print("llmgw: --root installs into a directory, which systemd does not manage; leave out --services "
              "or give --services supervised", file=sys.stderr)
        return 2
    target = Target.parse(args.ssh, args.port)
    program = program_file(args.program)
    password = read_secret(f"{target}'s password: ") if args.password else None
    sudo_password = read_secret(f"sudo password of {target}: ") if args.sudo_password else password
    known_hosts = Path(args.known_hosts) if args.known_hosts else Path(admin.token_path).parent / "known_hosts"
    job = NodeAdd(target=target, credentials=Credentials(args.key, password, sudo_password),
                  known_hosts=known_hosts, program=program, root=args.root or "/",
                  services=args.services or ("supervised" if args.root else None), name=args.name,
                  control_planes=args.control_planes, wait=args.wait)
    steps: list[Progress] = []

    def report(progress: Progress) -> None:
        if progress.state == "doing":
            return
        steps.append(progress)
        if not args.json:
            print(progress.shown(), flush=True)

    node = asyncio.run(add_node(job, admin, report))
    if args.json:
        emit_json({"node": node, "steps": [p.__dict__ for p in steps]})
        return 0
    print(f"\n{target.host} is in the cluster as {node['name'] or node['id']} ({node['id']}) and reports to "
          "the leader.")
    return 0
