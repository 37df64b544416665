"""Real `llmgw agent` processes for integration tests: joined to a real server, each with its own directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support import forkserver
from tests.support.servers import llmgw


class AgentProcess:
    def __init__(self, root: Path, name: str):
        self.name = name
        self.dir = root / f"node-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "agent.yaml"
        self.log_path = self.dir / "agent.log"
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        self.node_id = ""

    def join(self, server, engines_dir: Path | None = None, **settings) -> AgentProcess:
        made = server.ctl_json("node", "add", "--name", self.name)
        done = llmgw("join", made["code"], "--data-dir", str(self.dir / "data"), "--config", str(self.config),
                     "--json")
        assert done.returncode == 0, done.stderr
        self.node_id = json.loads(done.stdout)["node_id"]
        doc = yaml.safe_load(self.config.read_text())
        doc.update({"cache_dir": str(self.dir / "cache"), "advertise": "127.0.0.1",
                    # Tests run as whoever runs them (root in CI): engines run as the same user.
                    "engines": {"user": ""}, "log": {"level": "debug"}})
        doc.update(settings)
        self.config.write_text(yaml.safe_dump(doc))
        if engines_dir is not None:
            # Agents of one test share one llama.cpp install (the agent installs it into DATA/engines).
            (self.dir / "data").mkdir(exist_ok=True)
            link = self.dir / "data" / "engines"
            if not link.exists():
                os.symlink(engines_dir, link)
        return self

    def start(self, python: str | None = None) -> AgentProcess:
        """Start the agent with `python` (default this test's): its engines run with the same interpreter."""
        self.log = open(self.log_path, "ab")
        self.proc = forkserver.popen([python or sys.executable, "-m", "llmgw", "agent", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the agent dies at once, its engines (in process groups of their own) do not."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, stop_engines: bool = True) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if stop_engines:
            self.stop_engines()

    def stop_engines(self) -> None:
        """End the engines this node's agent left running, by the PIDs in its records (the test started them)."""
        for record in (self.dir / "data").glob("engines-run/shards/*/record.json"):
            try:
                pid = json.loads(record.read_text())["pgid"]
                os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
