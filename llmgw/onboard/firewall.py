"""nftables rules that close llmgw's internal ports to everything but the cluster's networks.

The rules live in a table of llmgw's own, `inet llmgw`, and nothing else
is touched: another table (Docker's, a site's own) goes on deciding as it
did. The table's one chain hooks input with policy accept and drops only
new connections to llmgw's internal ports from outside the cluster's
networks, so a port llmgw does not own is never closed by it. In nftables
a packet accepted by one table is still judged by every other table on
the hook, while a drop is final: so this table can close, never open,
what a site's own firewall decides.

What is open to whom:
- the client port (the API, the portal): everyone;
- the agent (mTLS), metrics and admin ports of a control plane, a node's
  engine ports, and on HA machines PostgreSQL (5432), Patroni's REST API
  (8008) and etcd (2379, 2380): the cluster's networks only;
- the model mirror's port, where mirror.yaml says one runs here: the
  cluster's networks only;
- loopback, and every connection already established (replies to this
  machine's own outgoing connections come back to the same ports engines
  are given): always.

On a node given a model mirror, a second chain hooks output and holds the
engines (the processes of agent.yaml's engines.user, `meta skuid`) to
loopback, the mirrors, the control planes and the cluster's networks: the
agent fetches their weights from the mirror, so an engine has no business
on the internet, and a model that tries (a tokenizer fetched at load, a
package installed at start) is refused at once (a TCP reset, an ICMP
error) rather than left to wait out a timeout.

The file is applied whole by `nft -f` as one transaction (declare, delete,
define), so there is never a moment with half the rules, and the rule that
keeps the SSH connection the change is made over comes first in it.

Rendering is pure (`render`), so every rule set llmgw would write can be
checked with `nft -c -f` without applying it; `apply`, `remove` and `listing`
are the only places that run nft.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import socket
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmgw.config import AgentConfig, MirrorConfig, ServerConfig, postgres_hosts
from llmgw.errors import ExpectedError

TABLE = "llmgw"
FAMILY = "inet"
MARK = "# Written by `llmgw firewall on`; `llmgw firewall off` deletes this table and nothing else."
KEEP_COMMENT = "the SSH connection this was set up over"
DROP_COMMENT = "llmgw's internal ports, from outside the cluster's networks"
EGRESS_DROP_COMMENT = "the engines' connections beyond the cluster and its mirrors, refused"

# Where the kernel takes the ports it hands out for port 0. The agent asks
# for a free port that way for each engine (agent/shards.py), so this range
# is the engines' on a node.
EPHEMERAL_PATH = "/proc/sys/net/ipv4/ip_local_port_range"
EPHEMERAL_DEFAULT = (32768, 60999)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Run = Callable[[list[str], str | None], str]


class FirewallError(ExpectedError):
    """Rules that cannot be written or applied as asked, said as a sentence."""


@dataclass(frozen=True)
class Ports:
    first: int
    last: int
    what: str

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


# On a machine carrying the three-machine store: Debian's PostgreSQL, Patroni's
# REST API (the other members and the floating address's checks ask it), and
# etcd's client and peer ports.
HA_PORTS = (Ports(5432, 5432, "PostgreSQL"), Ports(8008, 8008, "Patroni's REST API"),
            Ports(2379, 2379, "etcd's clients"), Ports(2380, 2380, "etcd's peers"))


@dataclass(frozen=True)
class SshKeep:
    """The connection `llmgw firewall on` is run over: from this client address to this port."""

    client: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int


@dataclass(frozen=True)
class Egress:
    """Where a node's engines may connect to, all else dropped: the rule for a node given a model mirror."""

    user: str
    uid: int
    mirrors: tuple[str, ...]
    """The mirrors as given (https://10.0.0.9:8600), for what is said of the rules."""
    to: tuple[Network, ...]
    """The mirrors' addresses, the control planes' and the cluster's networks, overlaps joined."""


@dataclass(frozen=True)
class Rules:
    public: tuple[Ports, ...] = ()
    internal: tuple[Ports, ...] = ()
    networks: tuple[Network, ...] = ()
    keep: SshKeep | None = None
    roles: tuple[str, ...] = field(default=())
    egress: Egress | None = None


def summary(rules: Rules) -> dict:
    """What the rules open to whom, as `status` says it of rules applied: for the plan, the CLI and --json."""
    egress = rules.egress
    return {"roles": list(rules.roles),
            "everyone": [str(p) for p in rules.public],
            "cluster": [str(p) for p in rules.internal],
            "networks": [str(n) for n in rules.networks],
            "ssh_kept": f"{rules.keep.client} to port {rules.keep.port}" if rules.keep else None,
            "engines_out": None if egress is None else {"user": egress.user, "mirrors": list(egress.mirrors),
                                                         "to": [str(n) for n in egress.to]}}


def parse_network(text: str) -> Network:
    """A network written as CIDR (10.0.0.0/24, fd00::/64) or one address; else one sentence."""
    written = text.strip()
    try:
        return ipaddress.ip_network(written, strict=False)
    except ValueError:
        raise FirewallError(
            f"{written!r} is not a network; write one like 10.0.0.0/24 or fd00::/64 "
            "(or one machine's address, like 10.0.0.7)") from None


def ssh_keep(value: str | None) -> SshKeep | None:
    """The current SSH connection from $SSH_CONNECTION ("client cport server sport"); None when not over SSH."""
    if not value or not value.strip():
        return None
    parts = value.split()
    try:
        if len(parts) != 4:
            raise ValueError(value)
        client = ipaddress.ip_address(parts[0].split("%", 1)[0])
        port = int(parts[3])
        if not 0 < port < 65536:
            raise ValueError(value)
    except ValueError:
        # Unreadable, so it cannot be kept: closing anything now could cut
        # the connection this is typed over.
        raise FirewallError(
            f"SSH_CONNECTION is {value!r}, which does not say the client's address and the port, so the "
            "connection this runs over cannot be kept open; run it from a plain ssh session, or unset "
            "SSH_CONNECTION when not over SSH") from None
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped:
        client = client.ipv4_mapped
    return SshKeep(client, port)


def ssh_connection_here() -> str | None:
    """$SSH_CONNECTION; or, where sudo took it away, the nearest ancestor's.

    sudo's env_reset (Debian's default) keeps no SSH_ variable, so under
    `sudo llmgw firewall on` this process never sees the connection it was
    typed over; the shell that ran sudo still has it in /proc/PID/environ,
    which root may read. Set but empty means "not over SSH" and is kept.
    """
    if "SSH_CONNECTION" in os.environ:
        return os.environ["SSH_CONNECTION"] or None
    pid = os.getppid()
    for _ in range(64):  # a bound, in case /proc shows a loop
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"SSH_CONNECTION="):
                        return item.split(b"=", 1)[1].decode("utf-8", "replace") or None
            with open(f"/proc/{pid}/stat") as f:
                # "PID (name) STATE PPID …": the name may hold spaces and parentheses.
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def control_plane_ports(cfg: ServerConfig) -> tuple[list[Ports], list[Ports]]:
    """(open to everyone, open to the cluster) for a control plane's listeners."""
    public = [Ports(cfg.listen.client.port, cfg.listen.client.port, "the client API and portal")]
    internal = [Ports(cfg.listen.agent.port, cfg.listen.agent.port, "agents and control planes (mTLS)")]
    if not cfg.listen.metrics.off:
        internal.append(Ports(cfg.listen.metrics.port, cfg.listen.metrics.port, "metrics"))
    if not cfg.listen.admin.is_loopback:
        internal.append(Ports(cfg.listen.admin.port, cfg.listen.admin.port, "the admin API"))
    return [p for p in public if p.first], [p for p in internal if p.first]


def ephemeral_ports(path: str = EPHEMERAL_PATH) -> Ports:
    """The engines' ports: the kernel's range for port 0, as this machine has it set."""
    try:
        with open(path) as f:
            first, last = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        first, last = EPHEMERAL_DEFAULT
    return Ports(first, last, "engines")


def is_ha_store(cfg: ServerConfig) -> bool:
    """A store under Patroni on the three machines: a PostgreSQL address naming several hosts."""
    return len(postgres_hosts(cfg.store)) > 1


def merged(ports: Iterable[Ports]) -> list[tuple[int, int]]:
    """Port ranges with overlaps and neighbours joined: nft refuses overlapping elements in one set."""
    spans = sorted((p.first, p.last) for p in ports)
    out: list[tuple[int, int]] = []
    for first, last in spans:
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _set(name: str, kind: str, elements: Sequence[str]) -> str:
    body = f"        type {kind}\n        flags interval\n"
    if elements:
        body += f"        elements = {{ {', '.join(elements)} }}\n"
    return f"    set {name} {{\n{body}    }}\n"


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def render(rules: Rules) -> str:
    """The whole file for `nft -f`: llmgw's table replaced in one transaction."""
    if not rules.public and not rules.internal:
        raise FirewallError("this machine has no llmgw port to open or close: it is neither a control plane "
                            "nor a node here; give --config or --agent-config")
    v4 = [n for n in rules.networks if n.version == 4]
    v6 = [n for n in rules.networks if n.version == 6]
    lines = [MARK, "#"]
    for p in rules.public:
        lines.append(f"# {p} open to everyone: {p.what}")
    for p in rules.internal:
        lines.append(f"# {p} open to the cluster's networks only: {p.what}")
    lines.append("# The cluster's networks: " + (", ".join(map(str, rules.networks)) or "none (loopback only)"))
    if rules.egress is not None:
        lines.append(f"# Engines ({rules.egress.user}, uid {rules.egress.uid}) may connect to loopback and "
                     f"{', '.join(map(str, rules.egress.to))} only; their mirrors: {', '.join(rules.egress.mirrors)}")
    # Declared, deleted, then defined: one transaction whether or not the table
    # was there, so the rules change at once and never stand half-written.
    lines += ["", f"table {FAMILY} {TABLE}", f"delete table {FAMILY} {TABLE}", "", f"table {FAMILY} {TABLE} {{"]
    text = "\n".join(lines) + "\n"
    text += _set("public_tcp", "inet_service", [_span(*s) for s in merged(rules.public)])
    text += _set("internal_tcp", "inet_service", [_span(*s) for s in merged(rules.internal)])
    text += _set("cluster_v4", "ipv4_addr", [str(n) for n in v4])
    text += _set("cluster_v6", "ipv6_addr", [str(n) for n in v6])
    chain = ["    chain input {",
             # Before the default filter priority, so a drop here is met before
             # another table has a chance to do work for nothing.
             "        type filter hook input priority filter - 5; policy accept;"]
    if rules.keep is not None:
        family = "ip" if rules.keep.client.version == 4 else "ip6"
        chain.append(f'        {family} saddr {rules.keep.client} tcp dport {rules.keep.port} accept '
                      f'comment "{KEEP_COMMENT}"')
    chain += ['        iif "lo" accept',
              "        ct state established,related accept",
              "        tcp dport @public_tcp accept",
              "        ip saddr @cluster_v4 tcp dport @internal_tcp accept",
              "        ip6 saddr @cluster_v6 tcp dport @internal_tcp accept",
              f'        tcp dport @internal_tcp counter drop comment "{DROP_COMMENT}"',
              "    }"]
    text += "\n".join(chain) + "\n"
    if rules.egress is not None:
        text += _egress(rules.egress)
    return text + "}\n"


def _egress(egress: Egress) -> str:
    """The output chain: the engine user's new connections held to the cluster and its mirrors."""
    v4 = [str(n) for n in egress.to if n.version == 4]
    v6 = [str(n) for n in egress.to if n.version == 6]
    text = _set("engines_out_v4", "ipv4_addr", v4) + _set("engines_out_v6", "ipv6_addr", v6)
    chain = ["    chain output {",
             "        type filter hook output priority filter - 5; policy accept;",
             # By number: the rules file is applied at boot, before any name service a site's users come from.
             f'        meta skuid {egress.uid} jump engines_out comment "{egress.user}"',
             "    }",
             "    chain engines_out {",
             '        oif "lo" accept',
             # An engine's answers to the control planes, and whatever it opened that is still allowed.
             "        ct state established,related accept",
             "        ip daddr @engines_out_v4 accept",
             "        ip6 daddr @engines_out_v6 accept",
             # Refused, not dropped: a drop on output leaves the engine waiting out its connect timeout (a model
             # that fetches its tokenizer at load hung for minutes); a reset or an ICMP error fails it at once.
             f'        meta l4proto tcp counter reject with tcp reset comment "{EGRESS_DROP_COMMENT}"',
             f'        counter reject with icmpx admin-prohibited comment "{EGRESS_DROP_COMMENT}"',
             "    }"]
    return text + "\n".join(chain) + "\n"


def _nft(args: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise FirewallError("nft is not installed here; apt-get install nftables, then run this again") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise FirewallError(f"nft {args[0]} failed: {said[0] if said else 'no reason given'}")
    return done.stdout


def check(text: str, run: Run = _nft) -> None:
    """nft's own check of a rule set (`nft -c -f -`), applying nothing."""
    run(["-c", "-f", "-"], text)


def apply(text: str, run: Run = _nft) -> None:
    run(["-f", "-"], text)


def remove(run: Run = _nft) -> bool:
    """Delete llmgw's table, and only it. False when there was none."""
    if listing(run) is None:
        return False
    run(["delete", "table", FAMILY, TABLE], None)
    return True


def listing(run: Run = _nft) -> dict | None:
    """`nft -j list table inet llmgw`, parsed; None when the table is not there."""
    try:
        out = run(["-j", "list", "table", FAMILY, TABLE], None)
    except FirewallError as e:
        if "No such file or directory" in str(e) or "does not exist" in str(e):
            return None
        raise
    return json.loads(out)


def need_root() -> None:
    if os.geteuid() != 0:
        raise FirewallError("changing or reading the firewall needs root; run it with sudo")


def _element(value: object) -> str:
    """One element of a set as nft's JSON gives it: 8080, {"range": [a, b]}, {"prefix": {...}}."""
    if isinstance(value, dict):
        if "range" in value:
            first, last = value["range"]
            return f"{first}-{last}"
        if "prefix" in value:
            return f"{value['prefix']['addr']}/{value['prefix']['len']}"
        if "elem" in value:
            return _element(value["elem"].get("val"))
    return str(value)


def opened(doc: dict) -> dict:
    """What llmgw's table, as `nft -j list` shows it, leaves open to whom."""
    sets: dict[str, list[str]] = {}
    keep = None
    refused = engines_refused = 0
    engine_user = None
    for item in doc.get("nftables", []):
        if "set" in item:
            sets[item["set"]["name"]] = [_element(e) for e in item["set"].get("elem", [])]
        rule = item.get("rule")
        if not rule:
            continue
        if rule.get("comment") == KEEP_COMMENT:
            matched = {m["match"]["left"]["payload"]["field"]: m["match"]["right"]
                       for m in rule["expr"] if "match" in m and "payload" in m["match"]["left"]}
            keep = f"{matched.get('saddr')} to port {matched.get('dport')}"
        if rule.get("comment") == DROP_COMMENT:
            refused = sum(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
        if rule.get("chain") == "output" and any("jump" in e for e in rule["expr"]):
            engine_user = rule.get("comment")
        if rule.get("comment") == EGRESS_DROP_COMMENT:
            engines_refused += sum(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
    engines_out = None
    if "engines_out_v4" in sets:
        engines_out = {"user": engine_user, "to": sets["engines_out_v4"] + sets.get("engines_out_v6", []),
                       "refused_packets": engines_refused}
    return {"everyone": sets.get("public_tcp", []),
            "cluster": sets.get("internal_tcp", []),
            "networks": sets.get("cluster_v4", []) + sets.get("cluster_v6", []),
            "ssh_kept": keep,
            "refused_packets": refused,
            "engines_out": engines_out}


def connected_networks(addresses: list[dict]) -> list[Network]:
    """The networks this machine is on, from `ip -j addr show`: every global address's, loopback left out."""
    found: list[Network] = []
    for link in addresses:
        for info in link.get("addr_info", []):
            if info.get("scope") != "global" or "local" not in info:
                continue
            net = ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}").network
            if not net.is_loopback and net not in found:
                found.append(net)
    return found


def read_addresses() -> list[dict]:
    """`ip -j addr show`, parsed; [] where iproute2 is missing (then networks must be given)."""
    try:
        done = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        return []
    if done.returncode != 0:
        return []
    return json.loads(done.stdout or "[]")


def control_plane_hosts(addresses: Iterable[str]) -> list[Network]:
    """A node's control planes (agent.yaml's HOST:PORT), as one-address networks; names are left out."""
    found: list[Network] = []
    for entry in addresses:
        host = entry.rsplit(":", 1)[0].strip("[]")
        try:
            net = ipaddress.ip_network(host)
        except ValueError:
            continue  # a host name: the machine's own networks, or --network, must cover it
        if net not in found:
            found.append(net)
    return found


def _covered(net: Network, networks: Sequence[Network]) -> bool:
    return any(net.version == c.version and net.subnet_of(c) for c in networks)  # type: ignore[arg-type]


def plan_rules(*, server: ServerConfig | None = None, agent: AgentConfig | None = None, ha: bool = False,
               networks: Sequence[str] = (), ssh_connection: str | None = None,
               addresses: list[dict] | None = None, engines: Ports | None = None,
               mirror: MirrorConfig | None = None, mirrors: Sequence[str] = (),
               uid_of: Callable[[str], int] | None = None, resolve: Callable[[str], list[str]] | None = None
               ) -> Rules:
    """The rules for this machine: what it runs (a control plane, a node, both; an HA store; a model mirror) and
    the cluster's networks, which are, first found: `networks` (--network), the configuration's firewall_networks,
    or the networks this machine is on (`addresses`, from `ip -j addr`) with, on a node, its control planes'
    addresses.

    On a node, the model mirrors (`mirrors`, --mirror; else agent.yaml's weights.mirror and server.yaml's
    mirror settings) hold its engines' connections to them, its control planes and the cluster's networks.
    """
    public: list[Ports] = []
    internal: list[Ports] = []
    roles: list[str] = []
    if server is not None:
        roles.append("control plane")
        pub, intl = control_plane_ports(server)
        public += pub
        internal += intl
        ha = ha or is_ha_store(server)
    if agent is not None:
        roles.append("node")
        internal.append(engines or ephemeral_ports())
    if ha:
        roles.append("HA store")
        internal += HA_PORTS
    if mirror is not None:
        roles.append("mirror")
        internal.append(Ports(mirror.listen.port, mirror.listen.port, "the model mirror (mTLS)"))
    chosen = [parse_network(n) for n in networks]
    if not chosen:
        written = (server.firewall_networks if server is not None else []) + \
                  (agent.firewall_networks if agent is not None else [])
        chosen = [parse_network(n) for n in written]
    if not chosen:
        chosen = connected_networks(addresses if addresses is not None else read_addresses())
        if agent is not None:
            chosen += [n for n in control_plane_hosts(agent.control_planes) if not _covered(n, chosen)]
    for n in chosen:
        if n.prefixlen == 0:
            raise FirewallError(
                f"{n} is every address, which would leave llmgw's internal ports open to everyone; name the "
                "cluster's networks, or turn the firewall off with `llmgw firewall off`")
    unique: list[Network] = []
    for n in chosen:
        if n not in unique:
            unique.append(n)
    egress = None
    if agent is not None:
        egress = engines_egress(agent, server, mirrors, unique, uid_of or _uid, resolve or _resolve)
    return Rules(tuple(public), tuple(internal), tuple(unique), ssh_keep(ssh_connection), tuple(roles), egress)


def node_mirrors(agent: AgentConfig, server: ServerConfig | None, given: Sequence[str]) -> list[str]:
    """The mirrors a node's engines may reach: --mirror, else agent.yaml's weights.mirror and, on a control
    plane's machine, server.yaml's mirror settings (what its install set)."""
    from llmgw.config import Invalid, check_mirror_url

    if given:
        for url in given:
            try:
                check_mirror_url("--mirror", url)
            except Invalid:
                raise FirewallError(f"--mirror {url!r} is not a mirror's address; write it as "
                                    "https://10.0.0.9:8600") from None
        found = list(given)
    else:
        found = [agent.weights.mirror] if agent.weights.mirror else []
        if server is not None:
            found += server.mirror.addresses
    return list(dict.fromkeys(u.rstrip("/") for u in found))


def engines_egress(agent: AgentConfig, server: ServerConfig | None, given: Sequence[str],
                   networks: Sequence[Network], uid_of: Callable[[str], int],
                   resolve: Callable[[str], list[str]]) -> Egress | None:
    """The engines' output rule, or None: without a mirror they fetch nothing through it and are left alone;
    with engines.user empty they run as the agent itself, which a rule by user would cut off too."""
    mirrors = node_mirrors(agent, server, given)
    user = agent.engines.user
    if not mirrors or not user:
        return None
    try:
        uid = uid_of(user)
    except KeyError:
        raise FirewallError(f"the engine user {user} is not on this machine yet, so no rule can hold its engines "
                            "to the mirror; start the agent once (it makes the user) or make it with "
                            f"`useradd --system {user}`, then run this again") from None
    to: list[Network] = list(networks) + control_plane_hosts(agent.control_planes)
    for url in mirrors:
        host = urlsplit(url).hostname or ""
        try:
            to.append(ipaddress.ip_network(host))
            continue
        except ValueError:
            pass
        found = resolve(host)
        if not found:
            raise FirewallError(f"the mirror {url} names {host}, which does not resolve here, so the engines "
                                "could not be let through to it; give the mirror by its address "
                                "(--mirror https://10.0.0.9:8600)")
        to += [ipaddress.ip_network(a) for a in found]
    # nft refuses overlapping elements in one set: a mirror inside a cluster network is that network.
    joined: list[Network] = [*ipaddress.collapse_addresses(n for n in to if isinstance(n, ipaddress.IPv4Network)),
                             *ipaddress.collapse_addresses(n for n in to if isinstance(n, ipaddress.IPv6Network))]
    return Egress(user, uid, tuple(mirrors), tuple(joined))


def _uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


def _resolve(host: str) -> list[str]:
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return list(dict.fromkeys(str(f[4][0]).split("%", 1)[0] for f in found))
