"""Real `llmgw server` processes on loopback, for the integration tests.

Each gets its own data directory and four free ports, runs `python -m
llmgw`'s own code in a process of its own (forked from the one that has
imported it already: tests/support/forkserver.py), and is ended by its own
PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support import forkserver
from tests.support.pgcluster import free_port

ROLES = ("client", "agent", "admin", "metrics")


def llmgw(*args: str, env: dict | None = None, timeout: float = 60, cwd: str | None = None,
          stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run one llmgw command to its end (forked from tests/support/forkserver.py where it can be)."""
    return forkserver.run([sys.executable, "-m", "llmgw", *args], timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd, input=stdin)


class InitCopies:
    """`llmgw server init`'s result, made once and copied into each data directory that would get the same.

    init is 0.7–1.0 s of a core (the store's migrations, scrypt of the first password), and nearly every
    integration test began with one. What it writes holds nothing of the server it was run for: the data
    directory gets the store (llmgw.db: settings from server.yaml's cluster keys, the first administrator,
    project and key) and the admin token, and neither names the server, its ports or its paths. Its output
    does (the client API's address, the admin token's path): those are written again for the copy. So a
    copy is what a real init there gives, but for the secrets, which the copies of one run share; each
    test's store and server are still its own.

    One template for each (server.yaml's text, init's arguments), made at first use; per test process
    (each xdist worker has its own).
    """

    # Only a server on its own SQLite store in its data directory, whose server.yaml moves nothing out of
    # it, is copied: a shared store (PostgreSQL, several control planes) is set up once, by a real init.
    MOVING_KEYS = ("data_dir", "store", "admin_token_file")
    FILES = ("llmgw.db", "admin-token")

    def __init__(self, root: Path):
        self.root = root
        self.made: dict[tuple[str | None, tuple[str, ...]], tuple[Server, subprocess.CompletedProcess]] = {}

    def eligible(self, server: Server, extra: tuple[str, ...]) -> bool:
        if extra not in ((), ("--json",)) or server.store != f"sqlite:{server.data_dir / 'llmgw.db'}":
            return False
        if any((server.data_dir / name).exists() for name in self.FILES):
            return False  # a second init is a test of what init says then
        if server.config is None:
            return True
        import yaml

        doc = yaml.safe_load(Path(server.config).read_text())
        return isinstance(doc, dict) and not any(key in doc for key in self.MOVING_KEYS)

    def init(self, server: Server, extra: tuple[str, ...]) -> subprocess.CompletedProcess:
        """What `server.init(*extra)` gives, from a copy when it is eligible."""
        if not self.eligible(server, extra):
            return llmgw("server", "init", *server.args(), *extra)
        config = Path(server.config).read_text() if server.config else None
        key = (config, extra)
        if key not in self.made:
            template = Server(self.root / f"template-{len(self.made)}", "template", config=server.config)
            done = llmgw("server", "init", *template.args(), *extra)
            if done.returncode != 0:
                return llmgw("server", "init", *server.args(), *extra)  # its own failure, said as its own
            self.made[key] = (template, done)
        template, done = self.made[key]
        for name in self.FILES:
            shutil.copy2(template.data_dir / name, server.data_dir / name)  # copy2 keeps the 0600
        out, err = done.stdout, done.stderr
        for text_from, text_to in [(str(template.data_dir), str(server.data_dir)),
                                   *((f"127.0.0.1:{template.ports[r]}", f"127.0.0.1:{server.ports[r]}")
                                     for r in ROLES)]:
            out, err = out.replace(text_from, text_to), err.replace(text_from, text_to)
        return subprocess.CompletedProcess(done.args, done.returncode, out, err)


class Server:
    def __init__(self, root: Path, name: str, store: str | None = None, config: str | None = None,
                 copies: InitCopies | None = None):
        self.name = name
        self.copies = copies
        self.data_dir = root / name
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = store or f"sqlite:{self.data_dir / 'llmgw.db'}"
        self.config = config
        self.ports = {role: free_port() for role in ROLES}
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
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
        if self.copies is not None:
            return self.copies.init(self, extra)
        return llmgw("server", "init", *self.args(), *extra)

    def start(self, wait: bool = True) -> Server:
        self.log = open(self.log_path, "ab")
        self.proc = forkserver.popen([sys.executable, "-m", "llmgw", "server", *self.args()],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy()
        return self

    # A server answers in 1-2 s on a quiet machine; with the suite's workers and another run on two cores, a
    # start was seen to take 25 s. Waiting longer costs a test nothing unless its server never answers.
    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            if self.get("/health")[0] == 200:
                return
            time.sleep(0.1)
        said = self.output()
        self.stop()  # not left running for the rest of the session by a test that has failed anyway
        raise AssertionError(f"{self.name} did not answer /health in {timeout} s:\n{said}")

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
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 60) -> SimEngine:
        """Started and answering /health; give a longer `timeout` to one loading a real model (--embedding-model)."""
        self.log = open(self.log_path, "ab")
        self.proc = forkserver.popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(self.port),
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
        said = self.output()
        self.stop()  # not left running for the rest of the session by a test that has failed anyway
        raise AssertionError(f"sim-engine --model {self.model} did not answer /health in {timeout:g} s; "
                             f"it said:\n{said}")

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


class ComfySim(SimEngine):
    """A real `llmgw sim-engine --comfyui` process, ComfyUI's stand-in (docs/sim-engine.md), on a free port."""

    def __init__(self, root: Path, *flags: str):
        super().__init__(root, "comfyui", *flags)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> ComfySim:
        self.log = open(self.log_path, "ab")
        self.proc = forkserver.popen([sys.executable, "-m", "llmgw", "sim-engine", "--comfyui", "--listen",
                                      "127.0.0.1", "--port", str(self.port), *self.flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sim-engine --comfyui exited with {self.proc.returncode}; it said:\n"
                                     f"{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/system_stats", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        said = self.output()
        self.stop()
        raise AssertionError(f"sim-engine --comfyui did not answer /system_stats in {timeout:g} s; it said:\n{said}")

    def history(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/history", timeout=5) as r:
            return json.loads(r.read())


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
