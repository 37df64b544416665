"""Real `llmgw server` processes on loopback, for the integration tests.

Each gets its own data directory and four free ports, runs `python -m
llmgw` exactly as a person would, and is ended by its own PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.pgcluster import free_port

ROLES = ("client", "agent", "admin", "metrics")


def llmgw(*args: str, env: dict | None = None, timeout: float = 60, cwd: str | None = None,
          stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run one llmgw command to its end."""
    return subprocess.run([sys.executable, "-m", "llmgw", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd, input=stdin)


class Server:
    def __init__(self, root: Path, name: str, store: str | None = None, config: str | None = None):
        self.name = name
        self.data_dir = root / name
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = store or f"sqlite:{self.data_dir / 'llmgw.db'}"
        self.config = config
        self.ports = {role: free_port() for role in ROLES}
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "server.log"

    def args(self) -> list[str]:
        args = ["--name", self.name, "--data-dir", str(self.data_dir), "--store", self.store]
        if self.config:
            args += ["--config", self.config]
        for role, port in self.ports.items():
            args += [f"--listen-{role}", f"127.0.0.1:{port}"]
        return args

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['client']}"

    @property
    def admin(self) -> str:
        return f"127.0.0.1:{self.ports['admin']}"

    @property
    def token_file(self) -> str:
        return str(self.data_dir / "admin-token")

    def init(self, *extra: str) -> subprocess.CompletedProcess:
        return llmgw("server", "init", *self.args(), *extra)

    def start(self, wait: bool = True) -> Server:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "llmgw", "server", *self.args()],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            if self.get("/health")[0] == 200:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not answer /health in {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, headers: dict | None = None) -> tuple[int, dict | None]:
        request = urllib.request.Request(self.client_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None

    def metric(self, name: str) -> float | None:
        """One unlabelled metric as the metrics port shows it now; None while the server does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=5) as r:
                text = r.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        return next((float(line.split()[1]) for line in text.splitlines() if line.split(" ", 1)[0] == name), None)

    def leads(self) -> bool:
        return self.get("/leader")[0] == 200

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """`llmgw ctl …`/`llmgw keys …` against this server; args[0] picks the command.

        Run in this process where the command allows it (tests/support/inprocess_cli.py): the same
        parser and command, without an interpreter's start. `llmgw(…)` is the program itself.
        """
        from tests.support.inprocess_cli import llmgw_here, runs_here

        argv = [*args, "--admin", self.admin, "--token-file", self.token_file]
        return llmgw_here(argv, timeout=timeout) if runs_here(argv) else llmgw(*argv, timeout=timeout)

    def ctl_json(self, *args: str):
        done = self.ctl(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
        return self.proc.returncode


class SimEngine:
    """A real `llmgw sim-engine` process on a free loopback port."""

    def __init__(self, root: Path, model: str = "sim", *flags: str):
        self.port = free_port()
        self.model = model
        self.flags = flags
        self.log_path = root / f"sim-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 20) -> SimEngine:
        """Started and answering /health; give a longer `timeout` to one loading a real model (--embedding-model)."""
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(self.port),
                                      "--model", self.model, *self.flags], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # A child that died (a bad flag, a model that would not load) fails the start at once, with what it
            # said: polling /health alone once waited out a 180 s timeout on an engine long gone.
            if self.proc.poll() is not None:
                raise AssertionError(f"sim-engine --model {self.model} exited with {self.proc.returncode} before "
                                     f"answering /health; it said:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        raise AssertionError(f"sim-engine --model {self.model} did not answer /health in {timeout:g} s; "
                             f"it said:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc:
            self.log.close()


def write_config(path: Path, doc: dict) -> str:
    import yaml

    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def serving_with_first_key(server):
    """Initialises and starts `server`, keeping the key `server init` made as `.key` and SDK clients for it
    as `.openai` and `.anthropic` (no retries: a test sees the first answer)."""
    import anthropic
    import openai

    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    server.start()
    server.openai = openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)
    server.anthropic = anthropic.Anthropic(api_key=server.key, base_url=server.client_url, max_retries=0)
    return server


def usage_rows(server, expect: int) -> list[dict]:
    """The server's usage rows (`ctl usage export`), oldest first, once `expect` of them are written:
    the writer batches them, so a test that has its answers may not have their rows yet."""
    from tests.support.waiting import wait_for

    def written():
        done = server.ctl("ctl", "usage", "export", "--format", "jsonl", "--since", "1h")
        got = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return got if len(got) >= expect else None
    got, _ = wait_for(written, timeout=15, interval=0.3)
    assert got is not None, f"fewer than {expect} usage rows"
    return sorted(got, key=lambda r: r["at"])


def breaker_state(gw) -> str:
    """The one endpoint's breaker as the metrics port shows it: closed, half_open or open."""
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.ports['metrics']}/metrics", timeout=5) as r:
        lines = [line for line in r.read().decode().splitlines() if line.startswith("llmgw_breaker_state{")]
    assert len(lines) == 1, lines
    return {"0.0": "closed", "1.0": "half_open", "2.0": "open"}[lines[0].rsplit(" ", 1)[1]]
