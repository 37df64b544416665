"""`llmgw stop`: a real install into a directory, serving the sim model, stopped by the one command docs/setup.md
names; afterwards no process it started runs and nothing listens on its ports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.support.installs import end_install
from tests.support.pgcluster import free_port

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("client", "agent", "admin", "metrics")


@pytest.fixture
def installed():
    """A directory install with the sim starter served; whatever is left of it is ended after the test.

    Not under pytest's tmp_path, which only root may enter: another user is to find the install and be refused.
    """
    above = Path(tempfile.mkdtemp(prefix="llmgw-stop-"))
    above.chmod(0o755)
    root = above / "root"
    ports = {role: free_port() for role in ROLES}
    try:
        done = install(root, ports)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["answer"]
        yield root, ports
    finally:
        end_install(root, f"127.0.0.1:{ports['admin']}", root / "var/lib/llmgw/admin-token")
        shutil.rmtree(above, ignore_errors=True)


def install(root: Path, ports: dict[str, int]) -> subprocess.CompletedProcess:
    listen = [arg for role in ROLES for arg in (f"--listen-{role}", f"127.0.0.1:{ports[role]}")]
    return subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(root),
                           "--services", "supervised", "--starter", "sim", *listen, "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def started_by(root: Path) -> tuple[dict[int, float], list[int]]:
    """Every process the install runs ({pid: its start time}, so a pid reused later is not taken for it) and the
    engines' ports: the supervisors and their units, everything those started, and each engine the agent
    recorded with every process of its group and every descendant it noted."""
    pids: set[int] = set()
    for state in (root / "run/llmgw").glob("*.json"):
        doc = json.loads(state.read_text())
        pids.update(p for p in (doc.get("supervisor"), doc.get("pid")) if p)
    engine_ports = []
    for record in (root / "var/lib/llmgw-agent/engines-run/shards").glob("*/record.json"):
        doc = json.loads(record.read_text())
        pids.add(doc["pid"])
        pids.update(p for p, _ in doc.get("descendants") or [])
        pids.update(p.pid for p in psutil.process_iter() if _pgid(p.pid) == doc["pgid"])
        engine_ports.append(doc["port"])
    for pid in list(pids):
        try:
            pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    alive = {}
    for pid in pids:
        try:
            alive[pid] = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            pass
    return alive, engine_ports


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def still_running(pids: dict[int, float]) -> list[str]:
    left = []
    for pid, started in pids.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return left


def listening(ports: list[int]) -> list[int]:
    return sorted({c.laddr.port for c in psutil.net_connections(kind="inet")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port in ports})


def test_llmgw_stop_ends_the_control_plane_the_agent_and_the_model_engine_of_a_directory_install(installed):
    root, ports = installed
    pids, engine_ports = started_by(root)
    all_ports = [*ports.values(), *engine_ports]
    # What the stop has to end: the sim model's engine and the judge's among the rest, each of them listening.
    assert engine_ports, "the install recorded no engine: the sim starter should be served"
    assert len(pids) >= 5 and listening(all_ports) == sorted(all_ports)

    # Another user may not stop it: refused in a sentence, and everything still runs.
    refused = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
                              "-m", "llmgw", "stop", "--root", str(root)], capture_output=True, text=True,
                             timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert refused.returncode == 1
    assert refused.stderr == (f"llmgw: this user may not stop what the install under {root} started; run it as "
                              f"the user that installed it (sudo llmgw stop --root {root})\n")
    assert len(still_running(pids)) == len(pids) and listening(all_ports) == sorted(all_ports)

    done = subprocess.run([sys.executable, "-m", "llmgw", "stop", "--root", str(root)], capture_output=True,
                          text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert still_running(pids) == []
    assert listening(all_ports) == []
    # It says what it stopped, in the order it did: the agent, the engines it left (the starter's and the
    # guardrails' judge's), the control plane.
    lines = done.stdout.splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("llmgw-agent.service: stopped (pid ")
    engines = sorted(line.split(": stopped ", 1)[1].split(" (pid")[0] for line in lines[1:3])
    assert all(line.startswith("engine ") for line in lines[1:3]) and engines == ["(judge-sim)", "(sim)"]
    assert lines[3].startswith("llmgw-server.service: stopped (pid ")
    # Said once more, it finds nothing to stop.
    again = subprocess.run([sys.executable, "-m", "llmgw", "stop", "--root", str(root)], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 0 and again.stdout == f"nothing of the install under {root} was running\n"

    # Nothing was removed: the install's own command starts it all again, and the model is served again.
    restarted = install(root, ports)
    assert restarted.returncode == 0, restarted.stderr
    steps = json.loads(restarted.stdout)["steps"]
    assert steps["server"] == "done" and steps["agent"] == "done" and steps["config"] == "unchanged", steps
    assert listening(all_ports[:4]) == sorted(all_ports[:4])


def test_llmgw_stop_where_nothing_is_installed_says_which_root_to_give(tmp_path):
    done = subprocess.run([sys.executable, "-m", "llmgw", "stop", "--root", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr == (f"llmgw: nothing of llmgw is installed under {tmp_path / 'none'} (there is no "
                           f"{tmp_path / 'none'}/etc/llmgw); give the --root the install was made with\n")
