"""`llmgw node add --ssh`: the CLI's face of onboard/nodeadd.py: secrets read, progress printed."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from llmgw.cli.output import emit_json

# The options below are in every `llmgw --help`; installing over SSH (asyncssh
# and the onboard package) is imported by the commands that do it.
if TYPE_CHECKING:
    from pathlib import Path

    from llmgw.onboard import Credentials, Progress


def read_secret(prompt: str) -> str:
    """From the terminal without echo, else one line of stdin: never from argv or the environment."""
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(prompt)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(f"llmgw: {prompt.rstrip(': ')} was asked for, and stdin ended first")
    return line.rstrip("\n")


SSH_ONLY = ("key", "password", "sudo_password", "port", "root", "services", "program", "known_hosts")


def ssh_options(parser, what: str) -> None:
    """The options of installing over SSH, the same for `node add` and `server add`."""
    ssh = parser.add_argument_group("installing over SSH")
    ssh.add_argument("--ssh", metavar="USER@HOST[:PORT]", help=f"log in there and install {what}")
    login_options(ssh)
    ssh.add_argument("--port", type=int, metavar="N", help="the SSH port (default 22, or the one in --ssh)")
    ssh.add_argument("--root", metavar="DIR",
                     help="install under DIR on that machine instead of / (for tests); implies --services "
                          "supervised")
    ssh.add_argument("--services", choices=("systemd", "supervised"),
                     help="who keeps the service running there (default: systemd where it runs the machine)")
    copy_options(ssh, what)


def login_options(group) -> None:
    """How to log in and become root there: for `--ssh` and for `server init --ha`'s other two machines."""
    group.add_argument("--key", metavar="FILE", help="the SSH private key to log in with (default: the SSH agent "
                                                     "at $SSH_AUTH_SOCK, then ~/.ssh's keys)")
    group.add_argument("--password", action="store_true",
                       help="log in with a password, read from the terminal (or the first line of stdin)")
    group.add_argument("--sudo-password", action="store_true",
                       help="sudo there asks for a password other than the login's: read it from the terminal "
                            "(or the next line of stdin); with --password alone, sudo is given that one")


def copy_options(group, what: str) -> None:
    group.add_argument("--program", metavar="FILE",
                       help="the llmgw.pyz to copy (default: the one this runs from)")
    group.add_argument("--known-hosts", metavar="FILE",
                       help="the host keys met before (default: known_hosts beside the admin token)")
    group.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                       help=f"how long to wait for {what} to answer once installed (default 120)")


def credentials(args, who: str) -> Credentials:
    """The login's password and sudo's, as the flags ask: read now, held in memory for the run only."""
    from llmgw.onboard import Credentials

    password = read_secret(f"{who}'s password: ") if args.password else None
    sudo_password = read_secret(f"sudo password of {who}: ") if args.sudo_password else password
    return Credentials(args.key, password, sudo_password)


def ssh_flags_without_ssh(args) -> int:
    """2 with a sentence when an SSH-only flag came without --ssh, else 0."""
    for flag in SSH_ONLY:
        if getattr(args, flag):
            print(f"llmgw: --{flag.replace('_', '-')} is for installing over SSH; give --ssh USER@HOST too",
                  file=sys.stderr)
            return 2
    return 0


def _job(args, known_hosts_dir: Path, cls=None, **extra):
    from pathlib import Path

    from llmgw.onboard import NodeAdd, Target, program_file

    cls = cls or NodeAdd
    target = Target.parse(args.ssh, args.port)
    program = program_file(args.program)
    known_hosts = Path(args.known_hosts) if args.known_hosts else known_hosts_dir / "known_hosts"
    return cls(target=target, credentials=credentials(args, str(target)),
               known_hosts=known_hosts, program=program, root=args.root or "/",
               services=args.services or ("supervised" if args.root else None), name=args.name,
               wait=args.wait, **extra)


def _reporter(args, steps: list[Progress]):
    def report(progress: Progress) -> None:
        if progress.state == "doing":
            return
        steps.append(progress)
        if not args.json:
            print(progress.shown(), flush=True)

    return report


def _systemd_in_a_directory(args) -> bool:
    if args.root and args.services == "systemd":
        print("llmgw: --root installs into a directory, which systemd does not manage; leave out --services "
              "or give --services supervised", file=sys.stderr)
        return True
    return False


def run_node_add_ssh(args, admin) -> int:
    import asyncio
    from pathlib import Path

    from llmgw.onboard import add_node

    if _systemd_in_a_directory(args):
        return 2
    from llmgw.cli.node import labels_given

    labels = labels_given(args)
    if labels is None:
        return 2
    job = _job(args, Path(admin.token_path).parent, control_planes=args.control_planes, labels=labels)
    steps: list[Progress] = []
    node = asyncio.run(add_node(job, admin, _reporter(args, steps)))
    if args.json:
        emit_json({"node": node, "steps": [p.__dict__ for p in steps]})
        return 0
    print(f"\n{job.target.host} is in the cluster as {node['name'] or node['id']} ({node['id']}) and reports to "
          "the leader.")
    return 0


def run_server_add_ssh(args, cfg) -> int:
    """`server add --ssh`: a standby sharing `cfg`'s store and master key."""
    import asyncio
    from pathlib import Path

    from llmgw.onboard import ServerAdd, add_server, shared_parts
    from llmgw.onboard import Target as _Target

    if _systemd_in_a_directory(args):
        return 2
    listen = {}
    for item in args.standby_listen or []:
        role, _, address = item.partition("=")
        if role not in ("client", "agent", "admin", "metrics") or not address:
            print(f"llmgw: --standby-listen {item!r}: write ROLE=ADDR with ROLE one of client, agent, admin, "
                  "metrics, e.g. --standby-listen client=:8080", file=sys.stderr)
            return 2
        listen[role] = address
    _Target.parse(args.ssh, args.port)  # a bad --ssh is refused before the master key is read
    master_key = shared_parts(cfg.store, cfg.data_dir)
    token_dir = Path(cfg.admin_token_file).parent if cfg.admin_token_file else Path(cfg.data_dir)
    job = _job(args, token_dir, cls=ServerAdd, store=cfg.store, master_key=master_key, listen=listen)
    steps: list[Progress] = []
    server = asyncio.run(add_server(job, _reporter(args, steps)))
    if args.json:
        emit_json({"server": server, "steps": [p.__dict__ for p in steps]})
        return 0
    print(f"\n{job.target.host} is a standby control plane ({server['name']}), answering {server['health']}.")
    return 0
