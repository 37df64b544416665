"""One agent per node identity on a machine: a second `llmgw agent` on the same data directory is refused before
it touches the first one's engines, and an agent killed outright does not block its own restart (issue 11)."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import psutil
import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.waiting import wait_for


@pytest.fixture
def node(server, tmp_path):
    made = server.ctl_json("keys", "create", "app", "--project", "Demo/dev/app", "--create")
    server.key = made["key"]
    agent = AgentProcess(tmp_path, "node-a").join(server)
    yield agent.start()
    agent.stop(stop_engines=True)


def _sim_ready(server, tmp_path) -> dict:
    path = tmp_path / "simmy.yaml"
    path.write_text(yaml.safe_dump({"name": "simmy",
                                    "profiles": [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]}))
    done = server.ctl("ctl", "model", "add", "-f", str(path))
    assert done.returncode == 0, done.stdout + done.stderr

    def ready():
        found = [r for r in server.ctl_json("ctl", "replicas", "--model", "simmy") if r["state"] == "ready"]
        return found[0] if found else None

    replica, _ = wait_for(ready, timeout=60, interval=0.5)
    assert replica, server.output()
    return replica


def _engine_pids(agent: AgentProcess) -> list[int]:
    return [json.loads(r.read_text())["pid"] for r in (agent.dir / "data").glob("engines-run/shards/*/record.json")]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _second_agent(agent: AgentProcess) -> subprocess.CompletedProcess:
    # --stop-engines as build.py runs it: the second agent of issue 11 stopped what it had adopted.
    return subprocess.run([sys.executable, "-m", "llmgw", "agent", "--config", str(agent.config), "--stop-engines"],
                          capture_output=True, text=True, timeout=60)


def test_a_second_agent_on_the_same_node_identity_is_refused_and_the_first_keeps_its_engine(server, node, tmp_path):
    before = _sim_ready(server, tmp_path)
    [engine] = _engine_pids(node)

    second = _second_agent(node)

    assert second.returncode == 1, second.stdout + second.stderr
    said = second.stderr.strip().splitlines()[-1]
    assert said.startswith("llmgw: another agent with this node's identity (node-a, ")
    assert f"is already running on this machine (pid {node.proc.pid}, " in said
    assert f"`kill {node.proc.pid}`" in said
    assert "Traceback" not in second.stderr
    assert "adopted" not in second.stdout + second.stderr
    # The first agent and its engine carry on as they were: same replica, same process, still answering.
    assert node.proc.poll() is None
    assert _alive(engine) and _engine_pids(node) == [engine]
    replicas = server.ctl_json("ctl", "replicas", "--model", "simmy", "--all")
    assert [(r["id"], r["state"]) for r in replicas] == [(before["id"], "ready")]
    client = openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)
    reply = client.chat.completions.create(model="simmy", messages=[{"role": "user", "content": "Hello"}],
                                           max_tokens=8)
    assert reply.choices[0].message.content


def test_an_agent_killed_outright_leaves_a_lock_file_that_does_not_block_its_restart(server, node, tmp_path):
    _sim_ready(server, tmp_path)
    [engine] = _engine_pids(node)
    node.kill()  # SIGKILL: no clean-up, the lock file stays with the dead agent's pid in it
    assert (node.dir / "data" / "agent.lock").read_text().strip().isdigit()

    node.start()

    assert wait_for(lambda: "adopted 1 engine(s)" in node.output(), timeout=30)[0], node.output()
    assert node.proc.poll() is None
    assert _engine_pids(node) == [engine] and _alive(engine)
