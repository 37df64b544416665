"""The floating address on a real network: two control planes, each with keepalived, and a client of the address.

Each control plane runs in a network namespace of its own, joined to this
machine by a bridge as machines are by a switch: its own `llmgw server`
(one SQLite store between them), the keepalived.conf its own
`llmgw server add --vip` wrote, and keepalived itself. The test is the
client, on the bridge, asking the floating address.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.servers import Server, free_port
from tests.support.waiting import wait_for

# 198.18.0.0/15 is set aside for tests of networks: each run takes a /24 of it no other run holds (Lan).
NETWORKS = [f"198.{second}.{third}" for second in (18, 19) for third in range(256)]
NETWORK_LOCK = "/tmp/llmgw-test-networks.lock"

# serial: keepalived's VRRP adverts move the address within seconds, which a loaded machine stretches past the
# test's waits. Two suites at once (the runs-in-a-row check loads the machine with a second one) each run it in
# their serial phase: each takes a network of its own, so neither answers for the other's addresses.
pytestmark = pytest.mark.serial


def ip(*args: str, ns: str | None = None) -> str:
    command = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


class Lan(dict):
    """The namespaces by name ("a", "b"), and the /24 they share with this machine's bridge."""

    def __init__(self, network: str, spaces: dict[str, str]):
        super().__init__(spaces)
        self.network = network
        self.vip = f"{network}.160/24"
        self.vip_address = f"{network}.160"


def _taken_networks() -> set[str]:
    used = ip("-4", "-o", "addr", "show")
    return {n for n in NETWORKS if f" {n}." in used}


@pytest.fixture
def lan():
    """Two namespaces, "a" and "b", each with lan0 on one bridge with this machine; removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("keepalived"):
        pytest.fail("this test needs root (network namespaces, keepalived) and keepalived installed, as CI has",
                    pytrace=False)
    tag = str(os.getpid() % 100000)
    bridge, made = f"lgwbr{tag}", []
    try:
        ip("link", "add", bridge, "type", "bridge")
        # Chosen and held under a lock: another run choosing at the same moment sees this one's address.
        with open(NETWORK_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            network = next(n for n in NETWORKS if n not in _taken_networks())
            ip("addr", "add", f"{network}.254/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        spaces = {}
        for n, side in (("a", 1), ("b", 2)):
            ns, outside = f"llmgw-{tag}-{n}", f"lgw{n}{tag}"
            ip("netns", "add", ns)
            made.append(ns)
            ip("link", "add", outside, "type", "veth", "peer", "name", "lan0", "netns", ns)
            ip("link", "set", outside, "master", bridge, "up")
            ip("link", "set", "lo", "up", ns=ns)
            ip("addr", "add", f"{network}.{side}/24", "dev", "lan0", ns=ns)
            ip("link", "set", "lan0", "up", ns=ns)
            spaces[n] = ns
    except RuntimeError as e:
        for ns in made:
            ip("netns", "del", ns)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        pytest.fail(f"could not make the test's network ({e}); it needs network namespaces", pytrace=False)
    yield Lan(network, spaces)
    for ns in made:
        ip("netns", "del", ns)  # takes its end of the veth pair, and so the other end, with it
    ip("link", "del", bridge)


class Namespaced(Server):
    """A real `llmgw server` in a namespace, serving clients on every interface there."""

    def __init__(self, root, name, store, ns, address, client_port):
        super().__init__(root, name, store)
        self.ns, self.address = ns, address
        self.ports["client"] = client_port

    def args(self) -> list[str]:
        args = super().args()
        args[args.index("--listen-client") + 1] = f":{self.ports['client']}"
        return args

    @property
    def client_url(self) -> str:
        return f"http://{self.address}:{self.ports['client']}"

    def start(self, wait: bool = True) -> Namespaced:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-m", "llmgw", "server",
                                      *self.args()], stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy()
        return self


def holder(lan: Lan) -> str | None:
    for n, ns in lan.items():
        if f"{lan.vip_address}/" in ip("-4", "-br", "addr", "show", "dev", "lan0", ns=ns):
            return n
    return None


def leader_through_the_address(lan: Lan, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{lan.vip_address}:{port}/leader", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_the_floating_address_follows_the_leader_when_it_stops(lan, tmp_path):
    store = f"sqlite:{tmp_path / 'llmgw.db'}"
    port = free_port()
    planes = {n: Namespaced(tmp_path, f"cp-{n}", store, lan[n], f"{lan.network}.{i}", port)
              for i, n in ((1, "a"), (2, "b"))}
    keepaliveds = []
    try:
        assert planes["a"].init().returncode == 0
        for n in planes:
            done = subprocess.run(["ip", "netns", "exec", lan[n], sys.executable, "-m", "llmgw", "server", "add",
                                   "--vip", lan.vip, "--listen-client", f":{port}", "--json",
                                   "--keepalived-conf", str(tmp_path / f"{n}.conf")],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["interface"] == "lan0"
        planes["a"].start()
        assert wait_for(planes["a"].leads, 30)[0], planes["a"].output()
        planes["b"].start()
        for n in lan:
            log = open(tmp_path / f"keepalived-{n}.log", "ab")
            keepaliveds.append(subprocess.Popen(
                ["ip", "netns", "exec", lan[n], "keepalived", "--dont-fork", "--log-console", "--vrrp",
                 "-f", str(tmp_path / f"{n}.conf"), "-p", str(tmp_path / f"{n}.pid"),
                 "-r", str(tmp_path / f"{n}.vrrp.pid")], stdout=log, stderr=subprocess.STDOUT))

        arrived, took = wait_for(lambda: holder(lan) == "a" and leader_through_the_address(lan, port), 30)
        assert arrived, (tmp_path / "keepalived-a.log").read_text()
        print(f"\nthe address reached the leader {took:.1f} s after keepalived started")

        planes["a"].stop()
        moved, took = wait_for(lambda: holder(lan) == "b" and leader_through_the_address(lan, port), 60, 0.05)
        assert moved, (tmp_path / "keepalived-b.log").read_text()
        assert planes["b"].leads()
        print(f"the leader stopped; the address answered /leader 200 from the new leader {took:.1f} s later")
        # Never on two machines at once once it settled.
        assert [n for n in lan if f"{lan.vip_address}/" in ip("-4", "-br", "addr", "show", ns=lan[n])] == ["b"]
    finally:
        for proc in keepaliveds:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for plane in planes.values():
            plane.stop()
