"""The fork server's promise: a command forked from it is what the same command exec'd would be to a test.

Each pair runs the same `python -m llmgw …` both ways and compares what a test sees: the exit code, what
it printed, the environment and working directory it ran with, its own PID, and how it ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support import forkserver
from tests.support.processes import first_line


@pytest.fixture(autouse=True)
def fork_server_on(monkeypatch):
    # These tests are about the fork server itself, so they run it even in a run that has it off
    # (LLMGW_TEST_FORKSERVER=off, or coverage measuring subprocesses) rather than being skipped there.
    monkeypatch.setenv("LLMGW_TEST_FORKSERVER", "on")
    for name in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert forkserver._enabled()


def llmgw_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmgw", *args]


def both(*args: str, env: dict[str, str] | None = None, cwd: str | None = None, stdin: str | None = None):
    argv = llmgw_argv(*args)
    env = {**os.environ, **(env or {})}
    forked = forkserver.run(argv, env=env, cwd=cwd, timeout=60, input=stdin)
    execd = subprocess.run(argv, env=env, cwd=cwd, timeout=60, input=stdin, capture_output=True, text=True)
    return forked, execd


def test_a_forked_command_exits_and_prints_as_the_same_command_execd():
    for args in [("--version",), ("no-such-command",), ("server", "--help"), ("ctl", "status", "--json")]:
        forked, execd = both(*args, env={"LLMGW_ADMIN": "127.0.0.1:1", "LLMGW_TOKEN_FILE": "/nonexistent"})
        assert (forked.returncode, forked.stdout, forked.stderr) == (execd.returncode, execd.stdout, execd.stderr)
    assert "no admin token at /nonexistent" in forked.stderr  # the environment it was given, not the server's


def test_a_forked_command_runs_in_the_environment_and_directory_it_was_given(tmp_path):
    # `server init` makes its data directory where it is told, relative to the working directory, and says
    # where.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    forked = forkserver.run(llmgw_argv("server", "init", "--data-dir", "here", "--store", "sqlite:here/llmgw.db"),
                            env=dict(os.environ), cwd=str(tmp_path / "a"), timeout=60)
    execd = subprocess.run(llmgw_argv("server", "init", "--data-dir", "here", "--store", "sqlite:here/llmgw.db"),
                           cwd=tmp_path / "b", timeout=60, capture_output=True, text=True)
    assert forked.returncode == execd.returncode == 0, forked.stderr
    assert (tmp_path / "a" / "here" / "llmgw.db").exists()
    assert str(tmp_path / "a" / "here") in forked.stdout
    assert str(tmp_path / "b" / "here") in execd.stdout
    assert len(forked.stdout.splitlines()) == len(execd.stdout.splitlines())


def test_a_forked_command_reads_its_standard_input():
    # --password-stdin refuses an empty line before it reaches for the admin API, and goes on with a password.
    said = {}
    for stdin in ("", "a password\n"):
        forked, execd = both("people", "add", "a@example.com", "--name", "A", "--password-stdin", stdin=stdin,
                             env={"LLMGW_ADMIN": "127.0.0.1:1", "LLMGW_TOKEN_FILE": "/nonexistent"})
        assert (forked.returncode, forked.stderr) == (execd.returncode, execd.stderr)
        said[stdin] = forked.stderr
    assert "read an empty line" in said[""]
    assert "read an empty line" not in said["a password\n"]


def test_a_forked_process_has_its_own_pid_and_reports_the_signal_that_ended_it(tmp_path):
    log = open(tmp_path / "sim.log", "wb")
    proc = forkserver.popen(llmgw_argv("sim-engine", "--port", "0"), stdout=log, stderr=subprocess.STDOUT)
    assert isinstance(proc, forkserver.ForkedProcess)
    assert proc.pid not in (os.getpid(), forkserver._server().proc.pid)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.poll() == -signal.SIGKILL
    log.close()


def test_a_forked_server_ends_on_sigterm_with_the_exit_code_it_gives_execd(tmp_path):
    procs = []
    for how in (forkserver.popen, subprocess.Popen):
        proc = how(llmgw_argv("sim-engine", "--port", "0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = first_line(proc.stdout.fileno(), 30)
        assert b"listening on" in line
        proc.send_signal(signal.SIGTERM)
        procs.append(proc)
    (_, forked_err), (_, execd_err) = (p.communicate(timeout=30) for p in procs)
    assert procs[0].returncode == procs[1].returncode, (forked_err, execd_err)


def test_a_command_whose_interpreter_would_start_differently_is_execd_not_forked():
    argv = llmgw_argv("--version")
    assert forkserver.forkable(argv, dict(os.environ))
    assert not forkserver.forkable(argv, {**os.environ, "PYTHONPATH": "/somewhere/else"})
    assert not forkserver.forkable(argv, {**os.environ, "LC_ALL": "tr_TR.UTF-8"})
    assert not forkserver.forkable(["/usr/bin/python3", "-m", "llmgw", "--version"], None)
    execd = forkserver.popen(argv, env={**os.environ, "PYTHONPATH": "/x"}, stdout=subprocess.DEVNULL)
    assert isinstance(execd, subprocess.Popen)
    assert execd.wait(timeout=30) == 0



def test_a_forked_command_is_killed_when_its_wait_is_cut_short_by_an_exception(monkeypatch):
    # pytest-timeout's Failed, or a ^C, raised inside run()'s wait: the command must not run on past its test,
    # as subprocess.run's does not.
    started = []
    original = forkserver.popen

    def recorded(*args, **kwargs):
        started.append(original(*args, **kwargs))
        return started[-1]

    class CutShort(Exception):
        pass

    def cut_short(signum, frame):
        raise CutShort

    monkeypatch.setattr(forkserver, "popen", recorded)
    forkserver._server()  # up before the clock starts: its own start takes about a second
    previous = signal.signal(signal.SIGALRM, cut_short)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(CutShort):
            forkserver.run(llmgw_argv("sim-engine", "--port", "0"), timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    [proc] = started
    assert isinstance(proc, forkserver.ForkedProcess)
    assert proc.wait(timeout=30) == -signal.SIGKILL
