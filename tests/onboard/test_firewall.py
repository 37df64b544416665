"""The firewall's rules: every set llmgw writes is one nft accepts, the SSH connection comes first, and on, status
and off run for real in a network namespace of their own.

Rules are checked with Debian's nft (`nft -c -f`, which applies nothing) and
applied only inside `unshare --net`: never in this machine's own namespace,
which other tests and the machine itself share.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap

import pytest

from llmgw.agent.shards import free_port as engine_port
from llmgw.config import AgentConfig, ConfigError, MirrorConfig, ServerConfig, load_server_config
from llmgw.config.agent import EngineSettings, WeightsSettings
from llmgw.config.mirror import MirrorSettings
from llmgw.config.server import Listen
from llmgw.config.types import Address, AddressOrOff
from llmgw.onboard import firewall
from llmgw.onboard.firewall import FirewallError, Ports, Rules, parse_network, plan_rules, render

NFT = shutil.which("nft") or "/usr/sbin/nft"
HA_STORE = "postgresql://llmgw:pw@10.0.0.5:5432,10.0.0.6:5432,10.0.0.7:5432/llmgw?target_session_attrs=read-write"
ENGINES = Ports(32768, 60999, "engines")
ADDRESSES = [  # `ip -j addr show` of a machine on one IPv4 and one IPv6 network, trimmed
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host"}]},
    {"ifname": "eth0", "addr_info": [
        {"family": "inet", "local": "10.0.0.5", "prefixlen": 24, "scope": "global"},
        {"family": "inet6", "local": "fd00:0:0:1::5", "prefixlen": 64, "scope": "global"},
        {"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"}]},
]


def nft_accepts(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "rules.nft"
    path.write_text(text)
    return subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)


def llmgw(*args: str, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "llmgw", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


MACHINES = {
    "control plane": dict(server=ServerConfig()),
    "node": dict(agent=AgentConfig(control_planes=["10.0.0.5:7443"])),
    "control plane and node": dict(server=ServerConfig(), agent=AgentConfig(control_planes=["127.0.0.1:7443"])),
    "HA machine": dict(server=ServerConfig(store=HA_STORE)),
    "node given two mirrors": dict(agent=AgentConfig(control_planes=["10.0.0.5:7443"]),
                                   mirrors=["https://10.0.0.9:8600", "https://[fd00::9]:8600"], uid_of=lambda u: 999),
    "control plane with a mirror, and node": dict(server=ServerConfig(), mirror=MirrorConfig(),
                                                  agent=AgentConfig(control_planes=["127.0.0.1:7443"]),
                                                  mirrors=["https://10.0.0.5:8600"], uid_of=lambda u: 999),
}
NETWORKS = {
    "IPv4": ["10.0.0.0/24", "192.168.7.0/24"],
    "IPv6": ["fd00:0:0:1::/64"],
    "both": ["10.0.0.0/24", "fd00:0:0:1::/64", "10.9.9.9"],
    "this machine's own": [],
}
CONNECTIONS = {"over SSH from IPv4": "10.0.0.99 51234 10.0.0.5 22",
               "over SSH from IPv6 to port 2222": "fd00:0:0:1::99 51234 fd00:0:0:1::5 2222",
               "not over SSH": None}


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("networks", NETWORKS)
@pytest.mark.parametrize("connection", CONNECTIONS)
def test_every_rule_set_llmgw_writes_is_one_nft_accepts(tmp_path, machine, networks, connection):
    rules = plan_rules(**MACHINES[machine], networks=NETWORKS[networks], ssh_connection=CONNECTIONS[connection],
                       addresses=ADDRESSES, engines=ENGINES)
    checked = nft_accepts(tmp_path, render(rules))
    assert checked.returncode == 0, checked.stderr


def test_the_ssh_connection_is_kept_by_the_first_rule_before_anything_is_closed():
    rules = plan_rules(server=ServerConfig(), networks=["10.0.0.0/24"],
                       ssh_connection="203.0.113.9 40000 10.0.0.5 2222")
    chain = render(rules).split("chain input {", 1)[1].splitlines()
    statements = [line.strip() for line in chain if line.strip() and not line.strip().startswith("type ")]
    assert statements[0].startswith("ip saddr 203.0.113.9 tcp dport 2222 accept")
    assert "drop" in statements[-3]


def test_an_ipv6_ssh_client_is_kept_with_an_ipv6_rule():
    rules = plan_rules(server=ServerConfig(), networks=["10.0.0.0/24"],
                       ssh_connection="fd00::99 40000 fd00::5 22")
    assert "ip6 saddr fd00::99 tcp dport 22 accept" in render(rules)


def test_without_ssh_no_connection_is_kept_and_the_rest_is_the_same():
    over_ssh = render(plan_rules(server=ServerConfig(), networks=["10.0.0.0/24"],
                                 ssh_connection="10.0.0.99 1 10.0.0.5 22"))
    local = render(plan_rules(server=ServerConfig(), networks=["10.0.0.0/24"], ssh_connection=None))
    assert "SSH connection" not in local
    assert [line for line in over_ssh.splitlines() if "SSH connection" not in line] == local.splitlines()


def test_the_client_port_is_open_to_everyone_and_the_internal_ports_to_the_cluster_only():
    cfg = ServerConfig(listen=Listen(client=Address(":8443"), metrics=AddressOrOff(":9191")))
    text = render(plan_rules(server=cfg, networks=["10.0.0.0/24"], ha=True))
    assert "set public_tcp {\n        type inet_service\n        flags interval\n        elements = { 8443 }" in text
    assert "elements = { 2379-2380, 5432, 7443, 8008, 9191 }" in text
    assert "elements = { 10.0.0.0/24 }" in text
    # The admin API listens on loopback by default, which is always allowed: no rule names it.
    assert "9090" not in text


def test_a_node_opens_its_engine_ports_to_its_networks_and_its_control_planes():
    rules = plan_rules(agent=AgentConfig(control_planes=["10.8.0.1:7443", "cp2.example:7443", "10.0.0.7:7443"]),
                       addresses=ADDRESSES, engines=Ports(40000, 40999, "engines"))
    assert rules.public == ()
    assert [str(p) for p in rules.internal] == ["40000-40999"]
    # 10.0.0.7 is on this machine's own network already; the name cannot be put in a rule.
    assert [str(n) for n in rules.networks] == ["10.0.0.0/24", "fd00:0:0:1::/64", "10.8.0.1/32"]


def test_a_store_naming_several_postgresql_hosts_opens_the_store_and_etcd_ports():
    rules = plan_rules(server=ServerConfig(store=HA_STORE), networks=["10.0.0.0/24"])
    assert "HA store" in rules.roles
    assert {5432, 8008, 2379, 2380} <= {p.first for p in rules.internal}


def test_networks_in_the_configuration_are_used_when_none_are_given(tmp_path):
    cfg = ServerConfig(firewall_networks=["10.1.0.0/16", "fd00::/48"])
    assert [str(n) for n in plan_rules(server=cfg).networks] == ["10.1.0.0/16", "fd00::/48"]
    assert [str(n) for n in plan_rules(server=cfg, networks=["10.2.0.0/16"]).networks] == ["10.2.0.0/16"]


@pytest.mark.parametrize("written", ["office", "10.0.0.0/33", "10.0.0.0/24,10.1.0.0/24", ""])
def test_a_network_that_is_not_a_cidr_is_refused_with_what_to_write(written):
    with pytest.raises(FirewallError) as refused:
        parse_network(written)
    assert str(refused.value) == (f"{written!r} is not a network; write one like 10.0.0.0/24 or fd00::/64 "
                                  "(or one machine's address, like 10.0.0.7)")


def test_the_command_says_a_bad_network_in_one_sentence_without_a_traceback(tmp_path):
    (tmp_path / "server.yaml").write_text("{}\n")
    done = llmgw("firewall", "on", "--print", "--config", str(tmp_path / "server.yaml"), "--network", "office")
    assert done.returncode == 1
    assert done.stderr == ("llmgw: 'office' is not a network; write one like 10.0.0.0/24 or fd00::/64 "
                           "(or one machine's address, like 10.0.0.7)\n")


def test_a_bad_network_in_server_yaml_is_refused_at_load_naming_the_key(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text("firewall_networks: [10.0.0.0/24, the office]\n")
    with pytest.raises(ConfigError) as refused:
        load_server_config(str(path))
    assert 'firewall_networks[1]: "the office" is not a network; write one like 10.0.0.0/24' in str(refused.value)


def test_an_unreadable_ssh_connection_refuses_rather_than_risk_cutting_it():
    with pytest.raises(FirewallError, match="cannot be kept open"):
        plan_rules(server=ServerConfig(), networks=["10.0.0.0/24"], ssh_connection="10.0.0.99 22")


def test_print_shows_the_rules_without_root_and_without_applying_them(tmp_path):
    (tmp_path / "agent.yaml").write_text("control_planes: ['10.0.0.5:7443']\nfirewall_networks: [10.0.0.0/24]\n")
    printed = llmgw("firewall", "on", "--print", "--agent-config", str(tmp_path / "agent.yaml"),
                    env={"SSH_CONNECTION": "10.0.0.99 5 10.0.0.5 22"})
    assert printed.returncode == 0, printed.stderr
    assert "ip saddr 10.0.0.99 tcp dport 22 accept" in printed.stdout
    assert nft_accepts(tmp_path, printed.stdout).returncode == 0


def _as_nobody() -> tuple[str, ...]:
    return ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


def test_changing_the_firewall_without_root_is_one_sentence():
    for action in ("on", "off", "status"):
        done = llmgw("firewall", action, *(["--ha"] if action == "on" else []), prefix=_as_nobody())
        assert done.returncode == 1, done.stderr
        assert done.stderr == "llmgw: changing or reading the firewall needs root; run it with sudo\n"


def in_own_namespace(tmp_path, script: str) -> subprocess.CompletedProcess:
    """Run a shell script in a network namespace of its own: nothing it applies reaches this machine's."""
    env = {**os.environ, "LLMGW": f"{sys.executable} -m llmgw", "DIR": str(tmp_path)}
    env["SSH_CONNECTION"] = ""  # set and empty: not over SSH, whatever the test's own ancestors were run over
    return subprocess.run(["unshare", "--net", "sh", "-euc", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120, env=env)


def test_on_status_and_off_work_for_real_and_leave_every_other_table_alone(tmp_path):
    (tmp_path / "server.yaml").write_text(f"store: {HA_STORE}\nfirewall_networks: [10.0.0.0/24, fd00::/64]\n")
    done = in_own_namespace(tmp_path, """
        nft add table inet site; nft add chain inet site input '{ type filter hook input priority 0; }'
        SSH_CONNECTION='10.0.0.99 51234 10.0.0.5 22' $LLMGW firewall on --config $DIR/server.yaml \\
            --rules-file $DIR/firewall.nft > $DIR/on.txt
        $LLMGW firewall on --config $DIR/server.yaml --rules-file $DIR/firewall.nft --json > $DIR/again.json
        $LLMGW firewall status --json > $DIR/status.json
        $LLMGW firewall status > $DIR/status.txt
        $LLMGW firewall off --rules-file $DIR/firewall.nft > $DIR/off.txt
        $LLMGW firewall status > $DIR/after.txt
        $LLMGW firewall off --rules-file $DIR/firewall.nft > $DIR/off-again.txt
        nft list tables > $DIR/tables.txt
    """)
    assert done.returncode == 0, done.stderr
    on = (tmp_path / "on.txt").read_text()
    assert on.startswith("firewall on (control plane and HA store): 8080 open to everyone; 7443, 9091, 5432, ")
    assert "kept: this SSH connection, from 10.0.0.99 to port 22" in on
    again = json.loads((tmp_path / "again.json").read_text())
    assert again == {"on": True, "roles": ["control plane", "HA store"], "everyone": ["8080"],
                     "cluster": ["7443", "9091", "5432", "8008", "2379", "2380"],
                     "networks": ["10.0.0.0/24", "fd00::/64"], "ssh_kept": None, "engines_out": None}
    status = json.loads((tmp_path / "status.json").read_text())
    # Run again without SSH_CONNECTION: the second `on` replaced the table whole.
    assert status == {"on": True, "everyone": ["8080"], "cluster": ["2379-2380", "5432", "7443", "8008", "9091"],
                      "networks": ["10.0.0.0/24", "fd00::/64"], "ssh_kept": None, "refused_packets": 0,
                      "engines_out": None}
    assert "open to the cluster:    2379-2380, 5432, 7443, 8008, 9091" in (tmp_path / "status.txt").read_text()
    assert (tmp_path / "off.txt").read_text() == "firewall off: llmgw's table deleted\n"
    assert not (tmp_path / "firewall.nft").exists()
    assert (tmp_path / "after.txt").read_text().startswith("firewall off: llmgw has no table here")
    assert (tmp_path / "off-again.txt").read_text() == "firewall off: llmgw had no table here\n"
    assert (tmp_path / "tables.txt").read_text() == "table inet site\n"


def test_the_kept_ssh_rule_is_in_force_after_on(tmp_path):
    (tmp_path / "server.yaml").write_text("firewall_networks: [10.0.0.0/24]\n")
    done = in_own_namespace(tmp_path, """
        SSH_CONNECTION='203.0.113.9 51234 10.0.0.5 2222' $LLMGW firewall on --config $DIR/server.yaml \\
            --rules-file $DIR/firewall.nft > /dev/null
        $LLMGW firewall status --json > $DIR/status.json
    """)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "status.json").read_text())["ssh_kept"] == "203.0.113.9 to port 2222"


def test_rules_with_nothing_to_close_are_refused_in_one_sentence():
    with pytest.raises(FirewallError, match="neither a control plane nor a node"):
        render(Rules())
    assert firewall.TABLE == "llmgw"


# Run inside `unshare --net`: a second namespace (the "other machine") joined
# to this one by a veth pair, with an address inside the cluster's network
# and one outside it on each end. Listeners stand for the client and agent
# ports; the other machine connects to each from each of its addresses.
TWO_MACHINES = r'''
import json, os, socket, subprocess, sys

out, config, client_port, agent_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def sh(command):
    subprocess.run(command, shell=True, check=True)

sh("ip link set lo up")
other = subprocess.Popen(["unshare", "--net", "sleep", "600"])
try:
    mine = os.readlink("/proc/self/ns/net")
    while os.readlink(f"/proc/{other.pid}/ns/net") == mine:  # until the other has its own namespace
        pass
    sh(f"ip link add here type veth peer name there && ip link set there netns {other.pid}")
    sh("ip addr add 10.0.0.1/24 dev here && ip addr add 10.9.9.1/24 dev here && ip link set here up")
    enter = f"nsenter --net=/proc/{other.pid}/ns/net"
    sh(f"{enter} sh -c 'ip link set lo up && ip addr add 10.0.0.2/24 dev there && "
       "ip addr add 10.9.9.2/24 dev there && ip link set there up'")
    listeners = []
    for port in (client_port, agent_port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(16)
        listeners.append(s)
    sh(f"{sys.executable} -m llmgw firewall on --config {config} --rules-file {out}/firewall.nft > /dev/null")
    probe = (
        "import json, socket, sys\n"
        "seen = {}\n"
        "for source in ('10.0.0.2', '10.9.9.2'):\n"
        "    for port in sys.argv[1:]:\n"
        "        s = socket.socket(); s.bind((source, 0)); s.settimeout(3)\n"
        "        try:\n"
        "            s.connect(('10.0.0.1', int(port))); seen[source + ' ' + port] = 'connected'\n"
        "        except OSError as e:\n"
        "            seen[source + ' ' + port] = type(e).__name__\n"
        "        s.close()\n"
        "print(json.dumps(seen))\n")
    done = subprocess.run([*enter.split(), sys.executable, "-c", probe, str(client_port), str(agent_port)],
                          capture_output=True, text=True, check=True)
    with open(f"{out}/seen.json", "w") as f:
        f.write(done.stdout)
    sh(f"{sys.executable} -m llmgw firewall status --json > {out}/status.json")
finally:
    other.kill()
'''


def test_another_machine_outside_the_cluster_reaches_the_client_port_but_not_the_agent_port(tmp_path):
    client_port, agent_port = 18080, 17443  # in a namespace of the test's own: nothing else is there
    config = tmp_path / "server.yaml"
    config.write_text(f"listen: {{client: ':{client_port}', agent: ':{agent_port}', metrics: 'off'}}\n"
                      "firewall_networks: [10.0.0.0/24]\n")
    (tmp_path / "two.py").write_text(TWO_MACHINES)
    done = subprocess.run(["unshare", "--net", sys.executable, str(tmp_path / "two.py"), str(tmp_path), str(config),
                           str(client_port), str(agent_port)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SSH_CONNECTION": ""})
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {f"10.0.0.2 {client_port}": "connected", f"10.0.0.2 {agent_port}": "connected",
                    f"10.9.9.2 {client_port}": "connected", f"10.9.9.2 {agent_port}": "TimeoutError"}
    assert json.loads((tmp_path / "status.json").read_text())["refused_packets"] >= 1


def test_under_sudo_which_drops_ssh_connection_the_shell_that_ran_it_still_names_the_connection(tmp_path):
    (tmp_path / "server.yaml").write_text("firewall_networks: [10.0.0.0/24]\n")
    # The shell has SSH_CONNECTION; the command it runs does not, as sudo's env_reset leaves it.
    env = {k: v for k, v in os.environ.items() if k != "SSH_CONNECTION"}
    shell = (f"env -u SSH_CONNECTION {sys.executable} -m llmgw firewall on --print "
             f"--config {tmp_path / 'server.yaml'}; exit $?")  # two commands: the shell stays, as sudo's parent
    done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60,
                          env={**env, "SSH_CONNECTION": "198.51.100.7 50000 10.0.0.5 22"})
    assert done.returncode == 0, done.stderr
    assert "ip saddr 198.51.100.7 tcp dport 22 accept" in done.stdout


@pytest.mark.parametrize("everyone", ["0.0.0.0/0", "::/0"])
def test_a_network_of_every_address_is_refused_since_it_would_close_nothing(everyone):
    with pytest.raises(FirewallError) as refused:
        plan_rules(server=ServerConfig(), networks=["10.0.0.0/24", everyone])
    assert str(refused.value).startswith(f"{everyone} is every address, which would leave llmgw's internal ports "
                                         "open to everyone; name the cluster's networks")


def test_every_port_the_agent_gives_an_engine_is_in_the_range_the_firewall_closes():
    # The firewall closes the kernel's range for port 0 because that is where the agent's engines listen;
    # an engine on a port outside it would be open to every machine while the firewall is on.
    closed = firewall.ephemeral_ports()
    ports = {engine_port() for _ in range(50)}
    assert all(closed.first <= port <= closed.last for port in ports), sorted(ports)


# -- the model mirror: its port in, and a node's engines held to it on the way out

def test_a_machine_running_the_mirror_opens_its_port_to_the_cluster_only():
    rules = plan_rules(server=ServerConfig(), mirror=MirrorConfig(listen=Address(":8601")), networks=["10.0.0.0/24"])
    assert "mirror" in rules.roles
    assert "the model mirror (mTLS)" in [p.what for p in rules.internal if p.first == 8601]
    assert "elements = { 7443, 8601, 9091 }" in render(rules)


def test_a_node_given_a_mirror_holds_its_engines_to_the_mirror_its_control_planes_and_networks():
    agent = AgentConfig(control_planes=["10.8.0.1:7443"], engines=EngineSettings(user="llmgw-engine"))
    rules = plan_rules(agent=agent, networks=["10.0.0.0/24", "fd00::/64"], engines=ENGINES,
                       mirrors=["https://10.7.0.2:8600", "https://10.0.0.9:8600/"],
                       uid_of={"llmgw-engine": 990}.__getitem__)
    assert rules.egress is not None
    # 10.0.0.9 is inside 10.0.0.0/24 already: nft refuses overlapping elements, so the two are one.
    assert [str(n) for n in rules.egress.to] == ["10.0.0.0/24", "10.7.0.2/32", "10.8.0.1/32", "fd00::/64"]
    text = render(rules)
    assert 'meta skuid 990 jump engines_out comment "llmgw-engine"' in text
    chain = text.split("chain engines_out {", 1)[1].split("}", 1)[0].split("\n")
    assert [line.strip() for line in chain if line.strip()] == [
        'oif "lo" accept', "ct state established,related accept", "ip daddr @engines_out_v4 accept",
        "ip6 daddr @engines_out_v6 accept",
        'meta l4proto tcp counter reject with tcp reset comment "the engines\' connections beyond the cluster and '
        'its mirrors, refused"',
        'counter reject with icmpx admin-prohibited comment "the engines\' connections beyond the cluster and its '
        'mirrors, refused"']
    assert firewall.summary(rules)["engines_out"] == {
        "user": "llmgw-engine", "mirrors": ["https://10.7.0.2:8600", "https://10.0.0.9:8600"],
        "to": ["10.0.0.0/24", "10.7.0.2/32", "10.8.0.1/32", "fd00::/64"]}


def test_without_a_mirror_a_node_has_no_output_rule_and_its_engines_are_left_alone():
    rules = plan_rules(agent=AgentConfig(control_planes=["10.0.0.5:7443"]), networks=["10.0.0.0/24"],
                       engines=ENGINES, uid_of=lambda u: 990)
    assert rules.egress is None
    assert "hook output" not in render(rules)


def test_a_node_learns_its_mirrors_from_agent_yaml_and_server_yaml_when_none_are_given():
    agent = AgentConfig(weights=WeightsSettings(mirror="https://10.0.0.9:8600"))
    server = ServerConfig(mirror=MirrorSettings(url="https://10.0.0.9:8600", peers=["https://10.0.0.10:8600"]))
    rules = plan_rules(server=server, agent=agent, networks=["10.0.0.0/24"], engines=ENGINES, uid_of=lambda u: 990)
    assert rules.egress is not None
    assert rules.egress.mirrors == ("https://10.0.0.9:8600", "https://10.0.0.10:8600")
    given = plan_rules(server=server, agent=agent, networks=["10.0.0.0/24"], engines=ENGINES, uid_of=lambda u: 990,
                       mirrors=["https://10.1.0.9:8600"])
    assert given.egress is not None and given.egress.mirrors == ("https://10.1.0.9:8600",)


def test_engines_run_as_the_agent_itself_get_no_output_rule_since_it_would_cut_off_the_agent():
    agent = AgentConfig(engines=EngineSettings(user=""))
    rules = plan_rules(agent=agent, networks=["10.0.0.0/24"], engines=ENGINES, mirrors=["https://10.0.0.9:8600"])
    assert rules.egress is None


def test_a_missing_engine_user_or_an_unresolvable_mirror_is_refused_in_one_sentence():
    def nobody_here(user: str) -> int:
        raise KeyError(user)

    with pytest.raises(FirewallError) as refused:
        plan_rules(agent=AgentConfig(), networks=["10.0.0.0/24"], engines=ENGINES,
                   mirrors=["https://10.0.0.9:8600"], uid_of=nobody_here)
    assert str(refused.value) == (
        "the engine user llmgw-engine is not on this machine yet, so no rule can hold its engines to the mirror; "
        "start the agent once (it makes the user) or make it with `useradd --system llmgw-engine`, then run this "
        "again")
    with pytest.raises(FirewallError, match=r"the mirror https://mirror.invalid:8600 names mirror.invalid, which "
                                            r"does not resolve here"):
        plan_rules(agent=AgentConfig(), networks=["10.0.0.0/24"], engines=ENGINES,
                   mirrors=["https://mirror.invalid:8600"], uid_of=lambda u: 990, resolve=lambda host: [])
    assert plan_rules(agent=AgentConfig(), networks=["10.0.0.0/24"], engines=ENGINES, uid_of=lambda u: 990,
                      mirrors=["https://mirror.example:8600"], resolve=lambda host: ["10.5.0.9"]
                      ).egress.to[1] == parse_network("10.5.0.9")  # type: ignore[union-attr]


def test_the_command_refuses_a_mirror_that_is_not_an_address_and_one_given_to_a_machine_that_is_no_node(tmp_path):
    (tmp_path / "agent.yaml").write_text("engines: {user: nobody}\nfirewall_networks: [10.0.0.0/24]\n")
    (tmp_path / "server.yaml").write_text("{}\n")
    bad = llmgw("firewall", "on", "--print", "--agent-config", str(tmp_path / "agent.yaml"), "--mirror", "10.0.0.9")
    assert bad.returncode == 1
    assert bad.stderr == "llmgw: --mirror '10.0.0.9' is not a mirror's address; write it as https://10.0.0.9:8600\n"
    no_node = llmgw("firewall", "on", "--print", "--config", str(tmp_path / "server.yaml"),
                    "--mirror", "https://10.0.0.9:8600")
    assert no_node.returncode == 1
    assert no_node.stderr.startswith("llmgw: --mirror holds a node's engines to the mirrors, and no agent.yaml is "
                                     "here")


def test_print_with_a_mirror_shows_the_engines_output_rule_and_nft_accepts_it(tmp_path):
    (tmp_path / "agent.yaml").write_text("control_planes: ['10.0.0.5:7443']\nengines: {user: nobody}\n"
                                         "firewall_networks: [10.0.0.0/24]\n")
    (tmp_path / "mirror.yaml").write_text("listen: ':8600'\n")
    printed = llmgw("firewall", "on", "--print", "--agent-config", str(tmp_path / "agent.yaml"),
                    "--mirror-config", str(tmp_path / "mirror.yaml"), "--mirror", "https://10.7.0.9:8600",
                    env={"SSH_CONNECTION": ""})
    assert printed.returncode == 0, printed.stderr
    nobody = pwd.getpwnam("nobody").pw_uid
    assert f'meta skuid {nobody} jump engines_out comment "nobody"' in printed.stdout
    assert "elements = { 10.0.0.0/24, 10.0.0.5/32, 10.7.0.9/32 }" not in printed.stdout  # 10.0.0.5 is joined in
    assert "elements = { 10.0.0.0/24, 10.7.0.9/32 }" in printed.stdout
    assert "8600" in printed.stdout.split("set internal_tcp", 1)[1].split("}", 1)[0]
    assert nft_accepts(tmp_path, printed.stdout).returncode == 0


# Inside `unshare --net`: the other machine (a second namespace, by veth) listens on an address inside the
# cluster's network, on the mirror's (outside it) and on one that is neither. This machine connects to each as
# the engine user and as root.
ENGINE_EGRESS = r'''
import json, os, socket, subprocess, sys

out, agent, port = sys.argv[1], sys.argv[2], int(sys.argv[3])

def sh(command):
    subprocess.run(command, shell=True, check=True)

sh("ip link set lo up")
other = subprocess.Popen(["unshare", "--net", "sleep", "600"])
try:
    mine = os.readlink("/proc/self/ns/net")
    while os.readlink(f"/proc/{other.pid}/ns/net") == mine:
        pass
    sh(f"ip link add here type veth peer name there && ip link set there netns {other.pid}")
    sh("ip addr add 10.0.0.1/24 dev here && ip addr add 10.7.0.1/24 dev here && ip addr add 10.9.9.1/24 dev here "
       "&& ip link set here up")
    enter = f"nsenter --net=/proc/{other.pid}/ns/net"
    sh(f"{enter} sh -c 'ip link set lo up && ip addr add 10.0.0.2/24 dev there && ip addr add 10.7.0.2/24 dev there "
       "&& ip addr add 10.9.9.2/24 dev there && ip link set there up'")
    listener = subprocess.Popen([*enter.split(), sys.executable, "-c",
        "import socket, sys\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('0.0.0.0', {port})); s.listen(64); print('up', flush=True)\n"
        "while True: s.accept()[0].close()\n"], stdout=subprocess.PIPE, text=True)
    listener.stdout.readline()
    sh(f"{sys.executable} -m llmgw firewall on --agent-config {agent} --mirror https://10.7.0.2:{port} "
       f"--rules-file {out}/firewall.nft > {out}/on.txt")
    probe = (
        "import json, socket, sys\n"
        "seen = {}\n"
        "for host in ('10.0.0.2', '10.7.0.2', '10.9.9.2'):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, int(sys.argv[1]))); seen[host] = 'connected'\n"
        "    except OSError as e:\n"
        "        seen[host] = type(e).__name__\n"
        "    s.close()\n"
        "print(json.dumps(seen))\n")
    seen = {}
    for who, prefix in (("engine", ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]),
                        ("root", [])):
        done = subprocess.run([*prefix, sys.executable, "-c", probe, str(port)], capture_output=True, text=True,
                              check=True)
        seen[who] = json.loads(done.stdout)
    with open(f"{out}/seen.json", "w") as f:
        json.dump(seen, f)
    sh(f"{sys.executable} -m llmgw firewall status --json > {out}/status.json")
    listener.kill()
finally:
    other.kill()
'''


def test_with_the_rule_on_the_engine_user_reaches_the_cluster_and_the_mirror_and_nothing_else(tmp_path):
    agent = tmp_path / "agent.yaml"
    agent.write_text("control_planes: ['10.0.0.2:7443']\nengines: {user: nobody}\nfirewall_networks: [10.0.0.0/24]\n")
    (tmp_path / "egress.py").write_text(ENGINE_EGRESS)
    done = subprocess.run(["unshare", "--net", sys.executable, str(tmp_path / "egress.py"), str(tmp_path), str(agent),
                           "18600"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SSH_CONNECTION": ""})
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    # An engine's connection beyond the cluster is refused at once (a reset, not a wait for the timeout), and
    # root, the agent, is not held by the rule at all.
    assert seen == {"engine": {"10.0.0.2": "connected", "10.7.0.2": "connected",
                               "10.9.9.2": "ConnectionRefusedError"},
                    "root": {"10.0.0.2": "connected", "10.7.0.2": "connected", "10.9.9.2": "connected"}}
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["engines_out"]["user"] == "nobody"
    assert status["engines_out"]["to"] == ["10.0.0.0/24", "10.7.0.2"]
    assert status["engines_out"]["refused_packets"] >= 1
    assert "engines (nobody) may connect to loopback and 10.0.0.0/24, 10.7.0.2/32 only" in \
        (tmp_path / "on.txt").read_text()
