"""`llmgw firewall on|off|status`: llmgw's internal ports closed to all but the cluster's networks (nftables)."""

from __future__ import annotations

import os

from llmgw.cli.output import emit_json, fields
from llmgw.cli.server import SYSTEM_CONFIG  # written out there: config is imported by the commands

AGENT_CONFIG = "/etc/llmgw/agent.yaml"
MIRROR_CONFIG = "/etc/llmgw/mirror.yaml"
# Kept where the unit systemd/llmgw-firewall.service reads it at boot: rules
# applied by nft alone are gone at the next start.
RULES_FILE = "/etc/llmgw/firewall.nft"


def register(commands) -> None:
    firewall = commands.add_parser(
        "firewall", help="close llmgw's internal ports to all but the cluster's networks (nftables)",
        description="Rules in nftables' table inet llmgw, and no other: the client port open to everyone; the "
                    "agent, metrics and engine ports, and on HA machines PostgreSQL, Patroni and etcd, open to "
                    "the cluster's networks only; loopback always. On a node given a model mirror, its engines may "
                    "connect to the mirrors, the control planes and the cluster's networks only. The SSH connection "
                    "this is run over is kept first. docs/firewall.md.")
    actions = firewall.add_subparsers(dest="action", metavar="ACTION", required=True)

    on = actions.add_parser("on", help="write and apply the rules (nft -f), kept for the next boot",
                            description="Work out this machine's rules from server.yaml and agent.yaml, apply "
                                        f"them in one transaction, and keep them in {RULES_FILE} for "
                                        "llmgw-firewall.service to apply at boot.")
    on.add_argument("--network", action="append", default=[], metavar="CIDR",
                    help="a network of the cluster (10.0.0.0/24, fd00::/64); again for each. Default: "
                         "firewall_networks from the configuration, else the networks this machine is on")
    on.add_argument("--config", metavar="PATH",
                    help=f"server.yaml, for a control plane's ports (default {SYSTEM_CONFIG} when it exists)")
    on.add_argument("--agent-config", metavar="PATH",
                    help=f"agent.yaml, for a node's engine ports (default {AGENT_CONFIG} when it exists)")
    on.add_argument("--mirror-config", metavar="PATH",
                    help=f"mirror.yaml, for the model mirror's port (default {MIRROR_CONFIG} when it exists)")
    on.add_argument("--mirror", action="append", default=[], metavar="URL",
                    help="a model mirror this node's engines may reach (https://10.0.0.9:8600); again for each. "
                         "Default: agent.yaml's weights.mirror and server.yaml's mirror settings. With one, the "
                         "engines may connect to the mirrors, the control planes and the cluster's networks only")
    on.add_argument("--ha", action="store_true",
                    help="this machine carries the three-machine store: open PostgreSQL, Patroni and etcd to "
                         "the cluster (implied by a store: naming several PostgreSQL hosts)")
    on.add_argument("--rules-file", metavar="PATH", default=RULES_FILE,
                    help=f"where the rules are kept for the next boot (default {RULES_FILE})")
    on.add_argument("--print", action="store_true", dest="print_only",
                    help="print the rules instead of applying them (needs no root)")
    on.add_argument("--json", action="store_true", help="print one JSON document of what was opened to whom")
    on.set_defaults(run=run_on)

    off = actions.add_parser("off", help="delete llmgw's table, and only it",
                             description="Delete nftables' table inet llmgw and the file kept for the next boot. "
                                         "Every other table is left as it is.")
    off.add_argument("--rules-file", metavar="PATH", default=RULES_FILE,
                     help=f"the rules kept for the next boot, removed too (default {RULES_FILE})")
    off.add_argument("--json", action="store_true", help="print one JSON document")
    off.set_defaults(run=run_off)

    status = actions.add_parser("status", help="what llmgw's rules leave open, to whom",
                                description="Read llmgw's table (nft -j list table inet llmgw) and say which ports "
                                            "are open to everyone, which to the cluster's networks only, and how "
                                            "many packets from elsewhere were refused.")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(run=run_status)


def _configs(args):
    from llmgw.config import load_agent_config, load_mirror_config, load_server_config

    server_path = args.config or (SYSTEM_CONFIG if os.path.exists(SYSTEM_CONFIG) else None)
    agent_path = args.agent_config or (AGENT_CONFIG if os.path.exists(AGENT_CONFIG) else None)
    mirror_path = args.mirror_config or (MIRROR_CONFIG if os.path.exists(MIRROR_CONFIG) else None)
    server = load_server_config(server_path) if server_path else None
    agent = load_agent_config(agent_path) if agent_path else None
    mirror = load_mirror_config(mirror_path) if mirror_path else None
    return server, agent, mirror


def run_on(args) -> int:
    from llmgw.files import write_atomic
    from llmgw.onboard import firewall

    server, agent, mirror = _configs(args)
    if server is None and agent is None and mirror is None and not args.ha:
        raise firewall.FirewallError(
            f"neither {SYSTEM_CONFIG} nor {AGENT_CONFIG} is here, so this machine runs no llmgw part whose "
            "ports could be closed; give --config or --agent-config")
    if args.mirror and agent is None:
        raise firewall.FirewallError(
            f"--mirror holds a node's engines to the mirrors, and no agent.yaml is here ({AGENT_CONFIG}); give "
            "--agent-config, or leave --mirror out on a machine that is not a node")
    rules = firewall.plan_rules(server=server, agent=agent, ha=args.ha, networks=args.network,
                                ssh_connection=firewall.ssh_connection_here(), mirror=mirror,
                                mirrors=args.mirror)
    text = firewall.render(rules)
    if args.print_only:
        print(text, end="")
        return 0
    firewall.need_root()
    firewall.apply(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.rules_file)), mode=0o755, exist_ok=True)
    write_atomic(args.rules_file, text.encode("utf-8"), 0o644)
    said = firewall.summary(rules)
    if args.json:
        emit_json({"on": True, **said})
        return 0
    print(f"firewall on ({' and '.join(said['roles'])}): {', '.join(said['everyone']) or 'no port'} open to "
          f"everyone; {', '.join(said['cluster'])} open to {', '.join(said['networks']) or 'none: loopback only'}")
    if said["ssh_kept"]:
        print(f"kept: this SSH connection, from {said['ssh_kept']}")
    if said["engines_out"]:
        out = said["engines_out"]
        print(f"engines ({out['user']}) may connect to loopback and {', '.join(out['to'])} only; "
              f"mirrors {', '.join(out['mirrors'])}")
    return 0


def run_off(args) -> int:
    from llmgw.onboard import firewall

    firewall.need_root()
    removed = firewall.remove()
    if os.path.exists(args.rules_file):
        os.unlink(args.rules_file)
    if args.json:
        emit_json({"removed": removed})
    else:
        print("firewall off: llmgw's table deleted" if removed else "firewall off: llmgw had no table here")
    return 0


def run_status(args) -> int:
    from llmgw.onboard import firewall

    firewall.need_root()
    doc = firewall.listing()
    if doc is None:
        if args.json:
            emit_json({"on": False})
        else:
            print("firewall off: llmgw has no table here (`llmgw firewall on` makes it)")
        return 0
    seen = firewall.opened(doc)
    if args.json:
        emit_json({"on": True, **seen})
        return 0
    fields([
        ("firewall", "on"),
        ("open to everyone", ", ".join(seen["everyone"]) or "nothing"),
        ("open to the cluster", ", ".join(seen["cluster"]) or "nothing"),
        ("the cluster's networks", ", ".join(seen["networks"]) or "none: loopback only"),
        ("SSH kept", seen["ssh_kept"] or "no SSH connection was kept"),
        ("refused from elsewhere", f"{seen['refused_packets']} packets"),
        ("engines may reach", ", ".join(seen["engines_out"]["to"]) + " and loopback" if seen["engines_out"]
         else "anywhere: no mirror was given"),
        *([("engines refused", f"{seen['engines_out']['refused_packets']} packets")] if seen["engines_out"] else []),
    ])
    return 0

