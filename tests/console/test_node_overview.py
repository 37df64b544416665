"""The node's overview (`sudo llmgw` on a node): read on the machine from the agent's own files, no admin token."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.waiting import wait_until


def _serve_sim(server, tmp_path, name: str = "simmy") -> dict:
    model = tmp_path / f"{name}.yaml"
    model.write_text(yaml.safe_dump({"name": name, "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                 "memory": "256MB"}]}))
    assert server.ctl("ctl", "model", "add", "-f", str(model)).returncode == 0
    return wait_until(lambda: [r for r in server.ctl_json("ctl", "replicas", "--model", name)
                               if r["state"] == "ready"], 60, f"{name} ready")[0]


@pytest.fixture
def short_dir():
    """A directory with a short path: the screen captured for docs/console.md then wraps no line for a path."""
    path = Path(tempfile.mkdtemp(prefix="llmgw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_node_overview_shows_the_agent_its_control_plane_its_engine_and_its_warnings(
        server, terminal, capture, tmp_path, short_dir, checkout_python):
    node = AgentProcess(short_dir, "node-a").join(server)
    # A record that is not one: the agent warns as it starts, and removes it.
    bogus = node.dir / "data" / "engines-run" / "shards" / "bogus"
    bogus.mkdir(parents=True)
    (bogus / "record.json").write_text("{}")
    node.start(python=checkout_python)
    try:
        replica = _serve_sim(server, tmp_path)
        agent_address = yaml.safe_load(node.config.read_text())["control_planes"][0]

        screen = terminal().start("console", "--agent-config", str(node.config))
        shown = screen.wait_for("running", f"connected to {agent_address}", "answers", replica["id"], "simmy",
                                "Free space", "not a shard record", timeout=60)
        assert shown.startswith(" llmgw node node-a ")
        assert "weights" in shown and "free of" in shown
        assert "pid" in shown and "Traceback" not in shown
        capture(screen, "node-overview")
    finally:
        node.stop(stop_engines=True)

    # The agent stopped: the overview says so, from the same files.
    screen.wait_for("NOT RUNNING", timeout=60)


def test_a_node_whose_agent_never_ran_says_so_and_what_to_do(terminal, tmp_path):
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump({"name": "fresh", "control_planes": ["127.0.0.1:1"],
                                      "data_dir": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache")}))

    screen = terminal().start("console", "--agent-config", str(config))

    shown = screen.wait_for("NEVER RAN", "NO ANSWER 127.0.0.1:1")
    # The sentence wraps where the test's temporary path makes it (a shorter --basetemp moved the break
    # into the command): read it as words.
    assert "(systemctl start llmgw-agent)" in " ".join(shown.split()), shown
    assert "Traceback" not in shown
