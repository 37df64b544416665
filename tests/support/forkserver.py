"""`python -m llmgw …` for the tests, forked from a process that has already imported llmgw.

The suite starts about 1,200 llmgw processes (control planes, agents, sim engines, `server init`), and a
control plane spent 0.57 s of its 0.73 s of CPU importing the 860 modules it runs on; on two cores that
import was a fifth of the whole run. So each test process keeps one fork server: a child that imports
those modules once and then forks a process for each command it is sent, running `python -m llmgw ARGS`'s
own code in it (runpy, as `-m` does) with the test's arguments, environment, working directory and
standard streams, and exiting as the interpreter would (non-daemon threads joined, atexit run).

What is forked is the real program in a real process of its own: its own PID, sockets, files and signals.
What differs from an exec is only what an interpreter's start decides from its environment, so a command
whose PYTHON*, locale or TZ variables differ from the fork server's is exec'd as before, as is any
command that is not `sys.executable -m llmgw`. Tests about the program as a program (its start time, its
imports, its exit on a signal in the first instant) start it themselves with subprocess.

The fork server is off when LLMGW_TEST_FORKSERVER=off, and when coverage measures subprocesses
(COVERAGE_PROCESS_START or _CONFIG): every command is then exec'd, which is how to check that nothing in a run
depends on it.

Protocol, over a SOCK_SEQPACKET Unix socket per command: the test sends one JSON request (argv, env,
cwd, umask, new_session) with its three standard streams as file descriptors; the fork server answers
"pid N", and later "exit CODE" (negative: the signal that ended it, as Popen says it).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

# What a control plane, an agent, a sim engine and the CLI import before they do anything; the rest (torch
# for an embedding model, asyncssh for an install) is imported by the command that needs it, as before.
PRELOAD = (
    "asyncio", "uvloop", "runpy",
    "llmgw.cli.main", "llmgw.cli.server", "llmgw.cli.agent", "llmgw.cli.sim", "llmgw.cli.ctl",
    "llmgw.cli.keys", "llmgw.cli.node", "llmgw.cli.people", "llmgw.cli.sshinstall",
    "llmgw.logsetup", "llmgw.config", "llmgw.trust", "llmgw.store", "llmgw.control", "llmgw.mcp",
    "llmgw.portal", "llmgw.onboard", "llmgw.agent", "llmgw.sim",
)

# Decided by an interpreter as it starts, so a command that sets them differently is exec'd.
_AT_START = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
_MAX_REQUEST = 1 << 20
# The environment the fork server starts in: this process's as the suite began, not as the test that happens
# to start the first command has changed it (a PYTHONPATH of its own would otherwise become the server's).
_BASE_ENV = dict(os.environ)


def _starts_same(env: dict[str, str], base: dict[str, str]) -> bool:
    def fixed(e: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in e.items() if k.startswith("PYTHON") or k in _AT_START}

    return fixed(env) == fixed(base)


# --- the fork server ---------------------------------------------------------------------------------------


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _run_llmgw(argv: list[str]) -> int:
    """`python -m llmgw ARGV` in this (forked) process, to the exit code the interpreter would give."""
    import runpy

    import llmgw

    sys.argv = [str(Path(llmgw.__file__).with_name("__main__.py")), *argv]
    try:
        runpy.run_module("llmgw", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except KeyboardInterrupt:
        code = -1
    except BaseException:  # noqa: BLE001 - as the interpreter does: told on stderr, exit 1
        sys.excepthook(*sys.exc_info())
        code = 1
    # As Py_FinalizeEx: non-daemon threads joined, then atexit, then the streams flushed.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    if code == -1:  # an uncaught KeyboardInterrupt ends the process by SIGINT, as CPython does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _child(request: dict[str, Any], fds: list[int], owned: list[Any]) -> None:
    try:
        for thing in owned:  # the fork server's sockets and selector: closed, not left to a finaliser
            thing.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        if request["new_session"]:
            os.setsid()
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `-m` puts the working directory first
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_llmgw(request["argv"])
    except BaseException:  # noqa: BLE001 - a fork server's child never returns into the fork server's loop
        sys.excepthook(*sys.exc_info())
        code = 1
    os._exit(code & 0xFF)


def serve(path: str) -> None:
    """The fork server's loop: a command forked per connection, its exit reported on that connection."""
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise SystemExit(f"fork server: importing {PRELOAD} started threads; forking would lose them")
    # What was imported is never collected: out of the collector's sight, a child's collections do not
    # write to (and so copy) every page of it.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "parent" and not os.read(sys.stdin.fileno(), 1 << 12):
                return  # the test process has gone: its commands run on, as an exec'd child's would
            if key.data == "accept":
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, [listener, conn, *waiting.values(), selector])
                for fd in fds:
                    os.close(fd)
                conn.send(f"pid {pid}".encode())
                waiting[pid] = conn
            if key.data == "reap":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(waiting)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            try:
                conn.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            except OSError:
                pass  # the test that started it has gone
            conn.close()


# --- the test's side -----------------------------------------------------------------------------------


class ForkedProcess:
    """What the tests use of subprocess.Popen, for a command the fork server started."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, pipes: dict[str, IO[bytes]]):
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self.stdin = pipes.get("stdin")
        self.stdout = pipes.get("stdout")
        self.stderr = pipes.get("stderr")
        self._said: tuple[bytes | None, bytes | None] | None = None

    def _exited(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready = selectors.DefaultSelector()
        ready.register(self._conn, selectors.EVENT_READ)
        try:
            if not ready.select(timeout):
                return False
        finally:
            ready.close()
        said = self._conn.recv(64).decode()
        self._conn.close()
        if not said.startswith("exit "):
            raise RuntimeError(f"the fork server went away while {self.args} ran (it said {said!r})")
        self.returncode = int(said.split()[1])
        return True

    def poll(self) -> int | None:
        self._exited(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[bytes | None, bytes | None]:
        """Read the piped streams to their end and wait: enough for the tests' use (no input). Called
        again, it gives what it read the first time."""
        if self._said is not None:
            self.wait(timeout)
            return self._said
        if self.stdin is not None:
            self.stdin.close()
        outs: dict[IO[bytes], list[bytes]] = {s: [] for s in (self.stdout, self.stderr) if s is not None}
        with selectors.DefaultSelector() as sel:
            for stream in outs:
                sel.register(stream, selectors.EVENT_READ)
            while sel.get_map():
                ready = sel.select(timeout)
                if not ready:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in ready:
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        outs[key.fileobj].append(chunk)  # type: ignore[index]
                    else:
                        sel.unregister(key.fileobj)
        self.wait(timeout)
        for stream in outs:
            stream.close()
        self._said = (b"".join(outs[self.stdout]) if self.stdout in outs else None,
                      b"".join(outs[self.stderr]) if self.stderr in outs else None)
        return self._said


class ForkServer:
    """One per test process, started at its first command and ended with that process."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="llmgw-forkserver-")
        self.path = os.path.join(self.dir, "socket")
        self.env = _BASE_ENV
        self.closed = False
        repo = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.forkserver", self.path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=repo, env=self.env)
        assert self.proc.stdout is not None
        said = self.proc.stdout.readline()
        if said != b"ready\n":
            self.proc.kill()
            raise RuntimeError(f"the tests' fork server did not start (exit {self.proc.wait()}): {said!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # its loop ends at EOF
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, argv: list[str], env: dict[str, str], cwd: str, stdio: list[int], new_session: bool,
              pipes: dict[str, IO[bytes]]) -> ForkedProcess:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        umask = os.umask(0o022)
        os.umask(umask)
        request = {"argv": argv[3:], "env": env, "cwd": cwd, "umask": umask, "new_session": new_session}
        socket.send_fds(conn, [json.dumps(request).encode()], stdio)
        said = conn.recv(64).decode()
        if not said.startswith("pid "):
            raise RuntimeError(f"the tests' fork server did not start {argv}: {said!r}")
        return ForkedProcess(argv, conn, int(said.split()[1]), pipes)


class _Holder:
    server: ForkServer | None = None
    pid = 0


def _enabled() -> bool:
    # coverage.py's subprocess measuring says itself by either variable (`patch = subprocess` sets the second).
    measured = "COVERAGE_PROCESS_START" in os.environ or "COVERAGE_PROCESS_CONFIG" in os.environ
    return os.environ.get("LLMGW_TEST_FORKSERVER", "on") != "off" and not measured


def _server() -> ForkServer:
    # A forked test process (a test that forks) must not share its parent's connection to the fork server.
    if _Holder.server is None or _Holder.pid != os.getpid():
        _Holder.server, _Holder.pid = ForkServer(), os.getpid()
    return _Holder.server


def forkable(argv: list[str], env: dict[str, str] | None) -> bool:
    """Whether `argv` is `python -m llmgw …` as this process would exec it, so the fork server may start it."""
    if not _enabled() or argv[:3] != [sys.executable, "-m", "llmgw"]:
        return False
    return _starts_same(dict(os.environ) if env is None else env, _server().env)


_Stream = int | IO[Any] | None


def _fd(stream: _Stream, default: int, name: str, pipes: dict[str, IO[bytes]], closing: list[int]) -> int:
    if stream is None:
        return default
    if stream == subprocess.PIPE:
        r, w = os.pipe()
        if name == "stdin":
            pipes[name] = open(w, "wb", buffering=0)  # the process's stdin, closed by its user
            closing.append(r)
            return r
        pipes[name] = open(r, "rb", buffering=0)  # read and closed by communicate
        closing.append(w)
        return w
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        closing.append(fd)
        return fd
    if isinstance(stream, int):
        return stream
    return stream.fileno()


def popen(argv: list[str], *, stdin: _Stream = None, stdout: _Stream = None, stderr: _Stream = None,
          env: dict[str, str] | None = None, cwd: str | None = None,
          start_new_session: bool = False) -> subprocess.Popen | ForkedProcess:
    """subprocess.Popen(argv, …), forked from the fork server where `forkable`."""
    if not forkable(argv, env):
        return subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                                start_new_session=start_new_session)
    pipes: dict[str, IO[bytes]] = {}
    closing: list[int] = []
    fd_in = _fd(stdin, 0, "stdin", pipes, closing)
    fd_out = _fd(stdout, 1, "stdout", pipes, closing)
    fd_err = fd_out if stderr == subprocess.STDOUT else _fd(stderr, 2, "stderr", pipes, closing)
    try:
        return _server().start(argv, dict(os.environ) if env is None else env, cwd or os.getcwd(),
                               [fd_in, fd_out, fd_err], start_new_session, pipes)
    finally:
        for fd in closing:
            os.close(fd)


def run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
        cwd: str | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, …), forked where `forkable`."""
    if not forkable(argv, env):
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, input=input)
    # Files rather than pipes: nothing to pump while it runs, and what it said is whole however much it was.
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        if input is not None:
            fin.write(input.encode())
            fin.seek(0)
        proc = popen(argv, stdin=fin if input is not None else subprocess.DEVNULL, stdout=fout, stderr=ferr,
                     env=env, cwd=cwd)
        try:
            code = proc.wait(timeout)
        except BaseException:
            # Its own timeout, and pytest-timeout's Failed or a ^C raised inside the wait alike, as subprocess.run
            # does: a `server init --install` left running past its test's timeout went on to install a control
            # plane's etcd and Patroni after the test's teardown, and they ran on (2026-12-07).
            proc.kill()
            proc.wait()
            raise
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read().decode(errors="replace"), ferr.read().decode(errors="replace")
    return subprocess.CompletedProcess(argv, code, out, err)


if __name__ == "__main__":
    serve(sys.argv[1])
