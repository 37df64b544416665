"""`llmgw node add` (on a control plane) and `llmgw join CODE` (on the new node)."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time

from llmgw.cli.output import emit_json, when

SYSTEM_AGENT_CONFIG = "/etc/llmgw/agent.yaml"


def register(commands, common) -> None:
    node = commands.add_parser("node", help="add nodes to the cluster",
                               description="Nodes of the cluster: the machines whose agents run the engines.")
    sub = node.add_subparsers(dest="node_command", metavar="COMMAND")
    add = sub.add_parser(
        "add", parents=[common], help="install a node over SSH, or print a one-time code that lets a new node join",
        description="With --ssh USER@HOST: install the node from here (docs/ssh-installs.md): copy this "
                    "program there, make the llmgw user and directories, write agent.yaml, join with a "
                    "one-time code, install and start llmgw-agent, and wait until it reports to the leader. "
                    "Each step can run again and says \"unchanged\" when there was nothing to do. "
                    "Without --ssh: print a join code; run `llmgw join CODE` on the new node. The code lets "
                    "in one node, once, before it runs out; it carries the control planes' agent addresses "
                    "and the cluster CA's fingerprint, so the node trusts only this cluster. Only a hash of "
                    "its secret is kept.")
    add.add_argument("--name", help="the node's name in the cluster (default: its host name)")
    add.add_argument("--ttl", default="1h", metavar="DURATION",
                     help="how long the code can be used, up to 7d (default 1h)")
    add.add_argument("--control-plane", action="append", metavar="HOST:PORT", dest="control_planes",
                     help="an agent address the node dials, instead of the ones the control planes "
                          "recorded (repeat for several); for a node that reaches them by another name")
    label_option(add, "the node's agent.yaml (with --ssh), or the `llmgw join` command printed")
    from llmgw.cli.sshinstall import ssh_options

    ssh_options(add, "the node")
    add.set_defaults(run=run_add)

    join = commands.add_parser(
        "join", help="join this machine to a cluster with a code from llmgw node add",
        description="Join this machine to a cluster: make a private key here (it never leaves the machine), "
                    "get its certificate from a control plane with the one-time code, and point agent.yaml "
                    "at the control planes. Run as root on a node.")
    join.add_argument("code", metavar="CODE", help="the code llmgw node add printed")
    join.add_argument("--config", metavar="PATH",
                      help=f"agent.yaml to write the control planes into (default {SYSTEM_AGENT_CONFIG})")
    join.add_argument("--data-dir", metavar="DIR",
                      help="where the node's certificate and key go (default: agent.yaml's data_dir, "
                           "/var/lib/llmgw-agent)")
    join.add_argument("--name", help="this node's name in the cluster, when the code does not set one "
                                     "(default: the host name)")
    join.add_argument("--force", action="store_true",
                      help="join again though this node has a certificate; it gets a new id")
    label_option(join, "agent.yaml")
    join.add_argument("--json", action="store_true", help="print one JSON document")
    join.set_defaults(run=run_join)


# A Kubernetes label's shape, less its length limits, and the same on the command line, in YAML and in the logs.
_LABEL_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?")


def label_option(parser, where: str) -> None:
    parser.add_argument("--label", action="append", metavar="KEY=VALUE", dest="labels",
                        help=f"a label of the node, which a model's node_selector can ask for (repeat for "
                             f"several), written into {where}; `llmgw.role=judge` keeps the node for the "
                             f"guardrails' judges")


def labels_given(args) -> dict[str, str] | None:
    """--label's KEY=VALUE pairs, or None after saying which one is not."""
    labels: dict[str, str] = {}
    for item in getattr(args, "labels", None) or []:
        key, eq, value = item.partition("=")
        if not eq or not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
            print(f"llmgw: --label {item!r}: write KEY=VALUE, letters, digits and . _ - (and / in the key), "
                  "each starting and ending with a letter or digit, e.g. --label llmgw.role=judge", file=sys.stderr)
            return None
        labels[key] = value
    return labels


def run_add(args) -> int:
    from llmgw.cli.ctl import client

    if args.ssh:
        from llmgw.cli.sshinstall import run_node_add_ssh

        return run_node_add_ssh(args, client(args))
    labels = labels_given(args)
    if labels is None:
        return 2
    from llmgw.cli.sshinstall import ssh_flags_without_ssh

    if ssh_flags_without_ssh(args):
        return 2
    made = client(args).call("POST", "/api/v1/nodes/join-codes",
                             {"name": args.name, "ttl": args.ttl, "control_planes": args.control_planes})
    # The labels are the node's own, in its agent.yaml: the code carries none, the command says them.
    made["command"] += "".join(f" --label {shlex.quote(f'{k}={v}')}" for k, v in labels.items())
    if args.json:
        emit_json(made)
        return 0
    left = max(0, made["expires_at"] - time.time())
    who = made["name"] or "a new node"
    print(f"Join code for {who}; it lets in one node, until {when(made['expires_at'])} "
          f"({_span(left)} from now). Run this on the node, as root:\n")
    print(f"  {made['command']}\n")
    fp = made["ca_fingerprint"]
    print(f"The node will dial {', '.join(made['control_planes'])} and trust only the cluster CA "
          f"sha256 {fp[:16]}…{fp[-8:]}.")
    if made.get("warning"):
        print(f"\nNote: {made['warning']}.")
    return 0


def _span(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds // 3600}h{f' {seconds % 3600 // 60}m' if seconds % 3600 >= 60 else ''}"
    if seconds >= 60:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def run_join(args) -> int:
    from llmgw.config import AgentConfig, load_agent_config
    from llmgw.trust import join

    labels = labels_given(args)
    if labels is None:
        return 2
    config = args.config or SYSTEM_AGENT_CONFIG
    configured = load_agent_config(config).data_dir if os.path.exists(config) else AgentConfig().data_dir
    data_dir = os.path.abspath(args.data_dir) if args.data_dir else configured
    done = join(args.code, data_dir, config, name=args.name, force=args.force,
                write_data_dir=data_dir != configured, labels=labels)
    if args.json:
        emit_json(done.as_dict())
        return 0
    print(f"Joined the cluster as {done.name} ({done.node_id}); {done.control_plane} signed its certificate.")
    print(f"  certificate  {os.path.join(done.data_dir, 'node.crt')} (its key, node.key, was made here and "
          f"never left this machine)")
    print(f"  agent.yaml   {done.config}: the control planes are now those of the code"
          + (f"; labels {', '.join(f'{k}={v}' for k, v in labels.items())}" if labels else ""))
    print(f"Start the agent: llmgw agent --config {done.config}")
    return 0
