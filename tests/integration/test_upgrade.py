"""Cluster upgrades with real machines: two control planes on PostgreSQL and two nodes, each an llmgw.pyz kept
running by the supervised service manager under a root of its own, moved from one build to another.

A machine here is what `llmgw server install`/`node add` over SSH leave on a real one: the program at
ROOT/usr/local/bin/llmgw, its configuration in ROOT/etc/llmgw, its unit from systemd/ run by a detached
supervisor that restarts it as the unit says. The upgrade replaces that program, and the supervisor starts
the new one; nothing in the test restarts a machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from llmgw import __version__
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import SupervisedManager
from tests.support.pgcluster import free_port
from tests.support.pyz import BROKEN_SENTENCE, broken, built_pyz, with_version
from tests.support.servers import llmgw
from tests.support.waiting import wait_until

# Slow: four machines started from an archive, and moved twice: minutes. In order: one story on one
# cluster (a broken build stops at v1, an upgrade moves everything to v2, a rollback brings it back), where a
# cluster for each test would cost another minute of starts apiece.
pytestmark = [pytest.mark.slow, pytest.mark.in_order]

MODEL = "simmy"
V2 = "0.2.0"
WITHIN = "40"  # seconds a machine has to come back healthy; its watchdog acts at half that


class Machine:
    """One machine under a root of its own, its service run by the supervised manager."""

    def __init__(self, root: Path, name: str, unit: str, program: Path):
        self.name, self.unit = name, unit
        self.layout = Layout(root / name)
        self.manager = SupervisedManager(self.layout)
        self.layout.program.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(program, self.layout.program)
        self.layout.program.chmod(0o755)
        self.layout.etc.mkdir(parents=True, exist_ok=True)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """The machine's own program, as a person on it runs it."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["LLMGW_PYZ_CACHE"] = str(self.layout.cache)
        return subprocess.run([sys.executable, str(self.layout.program), *args], capture_output=True, text=True,
                              timeout=timeout, env=env)

    def start(self) -> None:
        self.manager.install(self.unit)
        self.manager.start(self.unit)

    def log(self) -> str:
        path = self.layout.logs / f"{self.unit}.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else ""

    def stop(self) -> None:
        self.manager.stop(self.unit)


class ControlPlane(Machine):
    def __init__(self, root: Path, name: str, program: Path, store: str):
        super().__init__(root, name, "llmgw-server.service", program)
        self.ports = {role: free_port() for role in ("client", "agent", "admin", "metrics")}
        self.data = self.layout.server_data
        self.data.mkdir(parents=True, exist_ok=True)
        self.layout.server_config.write_text(yaml.safe_dump({
            "name": name, "store": store, "data_dir": str(self.data),
            "listen": {role: f"127.0.0.1:{port}" for role, port in self.ports.items()},
        }))

    def ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return llmgw(*args, "--admin", f"127.0.0.1:{self.ports['admin']}", "--token-file",
                     str(self.data / "admin-token"), timeout=timeout)

    def ctl_json(self, *args: str):
        done = self.ctl(*args, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['client']}{path}", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0


class Node(Machine):
    def __init__(self, root: Path, name: str, program: Path):
        super().__init__(root, name, "llmgw-agent.service", program)
        self.data = self.layout.agent_data

    def join(self, cp: ControlPlane) -> None:
        code = cp.ctl_json("node", "add", "--name", self.name)["code"]
        done = self.run("join", code, "--data-dir", str(self.data), "--config", str(self.layout.agent_config))
        assert done.returncode == 0, done.stderr
        doc = yaml.safe_load(self.layout.agent_config.read_text())
        doc.update({"cache_dir": str(self.layout.root / "var/cache/llmgw-weights"), "advertise": "127.0.0.1",
                    "engines": {"user": ""}})
        self.layout.agent_config.write_text(yaml.safe_dump(doc))

    def stop_engines(self) -> None:
        """End the engines this node's agents left running, by the PIDs in their records (the test started them)."""
        for record in self.data.glob("engines-run/shards/*/record.json"):
            try:
                os.killpg(json.loads(record.read_text())["pgid"], signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass


class Asker:
    """Clients asking /v1 all through, each request tried on both control planes for up to 15 s: lost ones count."""

    def __init__(self, planes: list[ControlPlane], key: str):
        self.planes, self.key = planes, key
        self.answered = 0
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ask(self, cp: ControlPlane) -> bool:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                           "max_tokens": 4}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{cp.ports['client']}/v1/chat/completions", data=body,
                                         headers={"Authorization": f"Bearer {self.key}",
                                                  "Content-Type": "application/json", "Connection": "close"})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            until = time.monotonic() + 15
            ok = False
            while not ok and time.monotonic() < until:
                ok = any(self._ask(cp) for cp in self.planes)
                if not ok:
                    self._stop.wait(0.2)
            if ok:
                self.answered += 1
            else:
                self.lost.append(f"request {n} at {time.strftime('%H:%M:%S')}")
            self._stop.wait(0.1)

    def __enter__(self) -> Asker:
        self._thread.start()
        wait_until(lambda: self.answered >= 3 or self.lost, 60, "the first answers to /v1")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres_cluster):
    """cp1 (leading) and cp2 on one PostgreSQL store, nodes gpu-1 and gpu-2 each serving a replica of `simmy`,
    every machine started from the same v1 llmgw.pyz; ends every service and engine it started."""
    v1 = built_pyz(tmp_path_factory)
    root = tmp_path_factory.mktemp("machines")
    store = postgres_cluster.create_database()
    cp1, cp2 = ControlPlane(root, "cp1", v1, store), ControlPlane(root, "cp2", v1, store)
    nodes = [Node(root, "gpu-1", v1), Node(root, "gpu-2", v1)]
    machines: list[Machine] = [cp1, cp2, *nodes]
    try:
        done = cp1.run("server", "init", "--config", str(cp1.layout.server_config))
        assert done.returncode == 0, done.stderr
        cp1.start()
        wait_until(lambda: cp1.get("/leader") == 200, 120, "cp1 leads:\n" + cp1.log())
        shutil.copy(cp1.data / "master-key", cp2.data / "master-key")
        os.chmod(cp2.data / "master-key", 0o600)
        cp2.start()
        wait_until(lambda: cp2.get("/health") == 200, 120, "cp2 answers /health")
        cp1.ctl_json("ctl", "config", "set", "router.active_active", "true")
        for node in nodes:
            node.join(cp1)
            node.start()
        wait_until(lambda: len(cp1.ctl_json("ctl", "nodes")) == 2, 120, "both nodes connected")
        model = root / "simmy.yaml"
        model.write_text(yaml.safe_dump({"name": MODEL, "scaling": {"min": 2},
                                         "profiles": [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]}))
        added = cp1.ctl("ctl", "model", "add", "-f", str(model))
        assert added.returncode == 0, added.stdout + added.stderr
        wait_until(lambda: len({r["node"] for r in cp1.ctl_json("ctl", "replicas", "--model", MODEL)
                                if r["state"] == "ready"}) == 2, 120, "a ready replica of simmy on each node")
        key = cp1.ctl_json("keys", "create", "app", "--project", "Demo/dev/app", "--create")["key"]
        yield {"cp1": cp1, "cp2": cp2, "nodes": nodes, "key": key, "v1": v1, "root": root}
    finally:
        for machine in machines:
            try:
                machine.stop()
            except Exception as e:  # noqa: BLE001 - stop the rest whatever one says
                print(f"{machine.name} did not stop: {e}")
        for node in nodes:
            node.stop_engines()


def versions(cp: ControlPlane) -> dict[str, str]:
    machines = cp.ctl_json("ctl", "status")["machines"]
    return {m["name"]: m["version"] for m in machines["control_planes"] + machines["nodes"]}


def either(cluster) -> ControlPlane:
    """Whichever control plane's admin API answers now."""
    return next(cp for cp in (cluster["cp1"], cluster["cp2"]) if cp.ctl("ctl", "status").returncode == 0)


def test_a_broken_build_stops_at_the_first_machine_which_is_put_back_on_v1_and_serves(cluster, tmp_path):
    cp1, cp2 = cluster["cp1"], cluster["cp2"]
    bad = broken(cluster["v1"], tmp_path / "broken.pyz", version="0.1.9")
    done = cp1.ctl("upgrade", str(bad), "--within", WITHIN, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout
    assert "wave 1: control plane cp2 (standby) 0.1.0 → 0.1.9: FAILED" in said, said
    assert ("STOPPED: Control plane cp2 did not come back on 0.1.9 within 40 s; its watchdog put 0.1.0 back and "
            "it serves again.") in said, said
    assert "Where it stands: cp2, cp1, gpu-1, gpu-2 on 0.1.0." in said, said
    assert "llmgw upgrade --resume" in said and "llmgw upgrade --rollback" in said
    assert BROKEN_SENTENCE in cp2.log()
    assert cp2.get("/health") == 200
    assert versions(cp1) == {"cp1": __version__, "cp2": __version__, "gpu-1": __version__, "gpu-2": __version__}
    assert (cp2.data / "upgrade-watchdog.log").read_text().count("the previous program is back") == 1


def test_an_upgrade_moves_standbys_then_the_leader_then_the_nodes_while_v1_answers_throughout(cluster, tmp_path):
    cp1, cp2 = cluster["cp1"], cluster["cp2"]
    v2 = with_version(cluster["v1"], V2, tmp_path / "llmgw-v2.pyz")
    with Asker([cp1, cp2], cluster["key"]) as asker:
        done = cp1.ctl("upgrade", str(v2), "--within", WITHIN, timeout=600)
        wait_until(lambda: asker.answered >= 3 + 5, 60, "answers after the upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"done: every machine is on {V2}" in done.stdout
    assert asker.lost == [], f"{len(asker.lost)} lost of {asker.answered + len(asker.lost)}"
    now = either(cluster)
    doc = now.ctl_json("upgrade", "--status")["upgrade"]
    order = [m["name"] for m in sorted(doc["machines"], key=lambda m: m["done_at"])]
    assert order == ["cp2", "cp1", "gpu-1", "gpu-2"]
    assert versions(now) == {"cp1": V2, "cp2": V2, "gpu-1": V2, "gpu-2": V2}
    # Leadership moved to the standby upgraded first when the leader upgraded itself.
    assert cp2.get("/leader") == 200
    for machine in (cp1, cp2, *cluster["nodes"]):
        assert machine.layout.previous_program.read_bytes() == cluster["v1"].read_bytes()


def test_a_rollback_puts_every_upgraded_machine_back_on_v1(cluster):
    now = either(cluster)
    done = now.ctl("upgrade", "--rollback", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: every machine the upgrade touched is back on the version it ran before" in done.stdout
    assert versions(either(cluster)) == {"cp1": __version__, "cp2": __version__, "gpu-1": __version__,
                                         "gpu-2": __version__}
