"""`python3 build.py run` as a person runs it: a control plane and a node come up together, the models answer
through /v1 with the openai SDK, and after Ctrl-C nothing it started is left running.

Each test gives build.py a directory of its own (LLMGW_RUN_DIR) and free ports, so a person's ./var and a
`build.py run` on the default ports are left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import psutil
import pytest

from tests.fixtures.tinygguf import write_tiny_gguf
from tests.support.pgcluster import free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent


class BuildRun:
    """One `build.py run` in the background, its output in a file."""

    def __init__(self, tmp_path: Path, *extra: str):
        self.tmp = tmp_path
        self.ports = {role: free_port() for role in ("client", "agent", "admin", "metrics")}
        self.extra = extra
        self.log_path = tmp_path / f"build-run-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> BuildRun:
        listen = [a for role, port in self.ports.items() for a in (f"--listen-{role}", f"127.0.0.1:{port}")]
        self.log = open(self.log_path, "wb")
        # From tmp_path, as a person would run it from anywhere: a relative --model is taken from there.
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "build.py"), "run", *self.extra, *listen],
                                     cwd=self.tmp, env={**os.environ, "LLMGW_RUN_DIR": str(self.tmp / "var")},
                                     stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def says(self, text: str, timeout: float) -> bool:
        wait_for(lambda: text in self.output() or self.proc.poll() is not None, timeout=timeout, interval=0.25)
        return text in self.output()

    def api_key(self) -> str:
        return next(line.split()[2] for line in self.output().splitlines() if line.strip().startswith("API key"))

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(api_key=key, base_url=f"http://127.0.0.1:{self.ports['client']}/v1", max_retries=0)

    def started(self) -> list[psutil.Process]:
        """Everything build.py has running now, by PID and start time (psutil compares both)."""
        return psutil.Process(self.proc.pid).children(recursive=True)

    def interrupt(self, timeout: float = 90) -> int:
        os.kill(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        """After a failed test: build.py and whatever it started, by their PIDs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for p in [*self.started(), psutil.Process(self.proc.pid)]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture
def runs():
    made: list[BuildRun] = []

    def make(tmp_path: Path, *extra: str) -> BuildRun:
        run = BuildRun(tmp_path, *extra)
        made.append(run)
        return run.start()

    yield make
    for run in made:
        run.kill()


def _answer(client: openai.OpenAI, model: str) -> str | None:
    try:
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello there"}],
                                               max_tokens=16)
    except (openai.APIError, openai.APIConnectionError):
        return None
    return reply.choices[0].message.content


def _left(processes: list[psutil.Process]) -> list[str]:
    """Those still running: a PID given since to another process does not count (is_running checks)."""
    left = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {' '.join(p.cmdline())}")
        except psutil.NoSuchProcess:
            pass
    return left


def _init_password(output: str) -> str:
    line = next(line for line in output.splitlines() if line.strip().startswith("administrator"))
    return line.split("password", 1)[1].split()[0]


def _commands(processes: list[psutil.Process]) -> str:
    return "\n".join(" ".join(p.cmdline()) for p in processes)


def test_build_run_serves_sim_from_a_control_plane_and_a_node_and_leaves_nothing_after_ctrl_c(runs, tmp_path):
    first = runs(tmp_path)
    assert first.says("sim: ready", timeout=120), first.output()
    assert "joining this machine to it as node 'local'" in first.output()
    assert "curl -s http://127.0.0.1:" in first.output()
    key = first.api_key()
    password = _init_password(first.output())
    portal = f"portal: http://127.0.0.1:{first.ports['client']}/  sign in as admin@localhost, password {password}"
    assert portal in first.output()
    assert (tmp_path / "var" / "first-admin").stat().st_mode & 0o777 == 0o600
    # What it says about the secrets is true: the key is kept nowhere, the password in first-admin.
    assert "The API key is shown once and kept nowhere: copy it now." in first.output()
    assert f"The administrator's password is kept in {tmp_path / 'var'}/first-admin" in first.output()
    assert "kept nowhere: copy them now" not in first.output()
    text, _ = wait_for(lambda: _answer(first.client(key), "sim"), timeout=20, interval=0.5)
    assert text, first.output()

    running = first.started()
    commands = _commands(running)
    assert " server " in commands and " agent " in commands and "sim-engine" in commands, commands
    assert first.interrupt() == 0, first.output()
    assert _left(running) == [], first.output()
    assert "stopped the server and the agent" in first.output()

    # Again on the same directory: set up already, the node's certificate kept, the catalog not added to twice.
    again = runs(tmp_path)
    assert again.says("sim: ready", timeout=120), again.output()
    out = again.output()
    assert not any(line.strip().startswith("API key") for line in out.splitlines()), out
    assert "joining" not in out, out
    assert "sim: in the catalog" in out
    # The password init printed once, kept for the person who runs it here (the second run has other ports).
    assert f"portal: http://127.0.0.1:{again.ports['client']}/  sign in as admin@localhost, password {password}" in out
    # Never "no secret is printed again" just above the password it prints.
    assert "no secret is printed again" not in out
    assert f"the first administrator's password is kept in {tmp_path / 'var'}/first-admin" in out
    assert '"Authorization: Bearer $OPENAI_API_KEY"' in out  # the key is printed once, at the first run
    text, _ = wait_for(lambda: _answer(again.client(key), "sim"), timeout=20, interval=0.5)
    assert text, out
    running = again.started()
    assert again.interrupt() == 0, again.output()
    assert _left(running) == [], again.output()


@pytest.mark.slow  # installs llama.cpp's server from PyPI into the node's directory
def test_build_run_with_a_gguf_serves_it_on_llamacpp_and_stops_its_engine(runs, tmp_path):
    write_tiny_gguf(tmp_path / "Tiny-Chat.gguf")
    run = runs(tmp_path, "--model", "Tiny-Chat.gguf")
    assert run.says("tiny-chat: ready", timeout=240), run.output()
    assert f"tiny-chat: added to the catalog (llama.cpp, {tmp_path / 'Tiny-Chat.gguf'}" in run.output()
    text, _ = wait_for(lambda: _answer(run.client(run.api_key()), "tiny-chat"), timeout=30, interval=0.5)
    assert text and text.strip(), run.output()

    running = run.started()
    assert "llama" in _commands(running), _commands(running)
    assert run.interrupt() == 0, run.output()
    assert _left(running) == [], run.output()


def test_build_run_refuses_a_gguf_that_is_not_there_before_starting_anything(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "build.py"), "run", "--model", "missing.gguf"], cwd=tmp_path,
                          env={**os.environ, "LLMGW_RUN_DIR": str(tmp_path / "var")}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert f"there is no file {tmp_path / 'missing.gguf'}" in done.stderr
    assert not (tmp_path / "var").exists()


def test_an_hf_gguf_is_sized_by_a_head_whose_redirect_is_not_followed(monkeypatch):
    """Following Hugging Face's redirect would turn the HEAD into a GET of the whole file."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import build

    asked: list[str] = []

    class HF(BaseHTTPRequestHandler):
        def do_HEAD(self):
            asked.append(f"HEAD {self.path}")
            self.send_response(302)
            self.send_header("Location", "/cdn/model.gguf")
            self.send_header("X-Linked-Size", str(3 << 30))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            asked.append(f"GET {self.path}")
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    hf = ThreadingHTTPServer(("127.0.0.1", 0), HF)
    threading.Thread(target=hf.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hf.server_address[1]}")
        model = build.gguf_model("hf:Org/Repo-GGUF/Model-Q4_K_M.gguf@v2")
    finally:
        hf.shutdown()
        hf.server_close()
    assert asked == ["HEAD /Org/Repo-GGUF/resolve/v2/Model-Q4_K_M.gguf"]
    assert model["name"] == "model-q4_k_m" and model["source"] == "hf:Org/Repo-GGUF/Model-Q4_K_M.gguf@v2"
    assert model["memory"] == "4096MB"  # 3 GB and a quarter more, at least 1 GB more
    assert model["cores"] == min(os.cpu_count() or 1, 6)


def test_a_second_build_run_on_the_same_directory_says_one_runs_and_leaves_the_first_serving(runs, tmp_path):
    first = runs(tmp_path)
    assert first.says("sim: ready", timeout=240), first.output()
    key = first.api_key()
    running = first.started()
    engines = [p.pid for p in running if "sim-engine" in " ".join(p.cmdline())]
    lock = (tmp_path / "var" / "run.lock").read_text()

    # The same directory and the same ports, as a person typing the command again in another terminal.
    second = subprocess.run([sys.executable, str(ROOT / "build.py"), "run",
                             *[a for role, port in first.ports.items() for a in (f"--listen-{role}",
                                                                                f"127.0.0.1:{port}")]],
                            cwd=tmp_path, env={**os.environ, "LLMGW_RUN_DIR": str(tmp_path / "var")},
                            capture_output=True, text=True, timeout=120)

    assert second.returncode == 1, second.stdout + second.stderr
    url = f"http://127.0.0.1:{first.ports['client']}/v1"
    assert (f"build: another `build.py run` is already running on {tmp_path / 'var'} "
            f"(pid {first.proc.pid}, client API {url})") in second.stderr
    assert "llmgw server" not in second.stdout and "agent" not in second.stdout, second.stdout
    assert (tmp_path / "var" / "run.lock").read_text() == lock
    # The first run never noticed: the same processes, its engine untouched, still answering.
    assert len(_left(running)) == len(running)
    assert [p.pid for p in first.started() if "sim-engine" in " ".join(p.cmdline())] == engines
    text, _ = wait_for(lambda: _answer(first.client(key), "sim"), timeout=20, interval=0.5)
    assert text, first.output()
    assert first.interrupt() == 0, first.output()
    assert "stopping engine" not in first.output()


def test_a_run_whose_lock_holder_crashed_starts_as_usual(runs, tmp_path):
    first = runs(tmp_path)
    assert first.says("the control plane is up", timeout=240), first.output()
    first.kill()  # build.py and everything it started, SIGKILL: run.lock stays behind with a dead pid in it
    assert (tmp_path / "var" / "run.lock").exists()

    again = runs(tmp_path)

    assert again.says("sim: ready", timeout=240), again.output()
    assert "already running" not in again.output()
    assert again.interrupt() == 0, again.output()


def test_build_run_does_not_take_another_server_on_its_port_for_its_own(runs, tmp_path):
    """The second run of issue 11 saw the first run's /health on :8080 and went on as if its server were up."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Healthy(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    run = BuildRun(tmp_path)
    other = ThreadingHTTPServer(("127.0.0.1", run.ports["client"]), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        run.start()
        assert run.proc.wait(timeout=120) == 1, run.output()
    finally:
        run.kill()
        other.shutdown()
        other.server_close()
    out = run.output()
    assert "the control plane is up" not in out, out
    assert "joining this machine" not in out and "llmgw agent" not in out, out
    # Refused before anything was set up, naming the port (issue 25: it used to set up and print secrets first).
    assert f"build: 127.0.0.1:{run.ports['client']} (the client API) already has a program listening" in out, out
    assert "llmgw server init" not in out and "administrator" not in out and "sk-llmgw-" not in out, out
    assert not (tmp_path / "var").exists()


def test_a_second_build_run_in_a_new_directory_on_the_same_ports_is_refused_before_any_credential(runs, tmp_path):
    first = runs(tmp_path)
    assert first.says("the control plane is up", timeout=240), first.output()
    listen = [a for role, port in first.ports.items() for a in (f"--listen-{role}", f"127.0.0.1:{port}")]

    # Another directory, the same ports: what a person did with LLMGW_RUN_DIR alone.
    second = subprocess.run([sys.executable, str(ROOT / "build.py"), "run", *listen], cwd=tmp_path,
                            env={**os.environ, "LLMGW_RUN_DIR": str(tmp_path / "two")},
                            capture_output=True, text=True, timeout=120)

    said = second.stdout + second.stderr
    assert second.returncode == 1, said
    assert f"127.0.0.1:{first.ports['client']} (the client API)" in second.stderr
    assert "Nothing was set up and no password or key was made" in second.stderr
    assert "--listen-client 127.0.0.1:" in second.stderr  # a free port to give instead
    assert "sk-llmgw-" not in said and "password " not in said.replace("no password or key", ""), said
    assert not (tmp_path / "two").exists()
    assert first.interrupt() == 0, first.output()


def test_a_server_that_never_starts_is_given_no_password_or_key_on_the_screen(runs, tmp_path):
    run = runs(tmp_path, "--workers", "0")  # init takes no --workers; the server refuses it and exits
    assert run.proc.wait(timeout=120) != 0, run.output()
    out = run.output()
    assert "the control plane is up" not in out, out
    assert "sk-llmgw-" not in out and "administrator   admin@localhost" not in out, out
    assert "the server never came up, so the key init made is not shown" in out, out
    assert (tmp_path / "var" / "first-admin").stat().st_mode & 0o777 == 0o600
