"""The supervised service manager's supervisor: one detached process per unit, for machines without systemd.

`llmgw onboard supervise --root DIR UNIT` forks twice and returns once the
unit's process has started (or with the sentence why it could not). What is
left runs in a session of its own, so it outlives the SSH session or the
test that started it: it runs the unit's ExecStart with the paths that
exist under the root put there, restarts it as Restart=/RestartSec= say,
and on SIGTERM stops it as KillMode= says (the agent's engines, in process
groups of their own, outlive an agent stopped with KillMode=process).

Its state (its own pid and start time, the unit's pid) is in RUN/UNIT.json
and its output and the unit's in LOGS/UNIT.log.
"""

from __future__ import annotations

import json
import os
import pwd
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmgw.files import write_atomic
from llmgw.onboard.layout import Layout
from llmgw.onboard.steps import StepFailed
from llmgw.onboard.units import ServiceSpec, expand, parse_service, read_environment

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The accounts an install makes, on the machine itself only (llmgw.onboard.machine.USER).
INSTALL_MADE_USERS = frozenset({"llmgw"})


def account_exists(name: str) -> bool:
    """Whether this machine has the user `name`."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def process_start(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None when no such process.

    A pid file alone cannot tell our supervisor from an unrelated process
    that got the same pid after a reboot or a crash; pid and start time
    together can.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def state_path(layout: Layout, unit: str) -> Path:
    return layout.run / f"{unit}.json"


def log_path(layout: Layout, unit: str) -> Path:
    return layout.logs / f"{unit}.log"


def read_state(layout: Layout, unit: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(state_path(layout, unit).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def supervisor_alive(state: dict[str, Any] | None) -> bool:
    """True when the supervisor the state names is still that process (not a pid reused since)."""
    if not state:
        return False
    pid, started = state.get("supervisor"), state.get("supervisor_start")
    return isinstance(pid, int) and started is not None and process_start(pid) == started


def detach(layout: Layout, unit: str) -> int:
    """Start the supervisor of `unit` detached; 0 once the unit's process runs, 1 with a sentence on stderr."""
    spec = parse_service(layout.unit_file(unit).read_text(), unit)
    layout.run.mkdir(parents=True, exist_ok=True)
    layout.logs.mkdir(parents=True, exist_ok=True)
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        os.close(ready_w)
        said = b""
        while chunk := os.read(ready_r, 4096):
            said += chunk
        os.close(ready_r)
        if said == b"ok":
            return 0
        print(f"llmgw: {said.decode(errors='replace') or f'the supervisor of {unit} ended before it started it'}",
              file=sys.stderr)
        return 1
    # The middle process: a session of its own (no terminal, no SIGHUP when
    # the SSH session ends), then gone, so the supervisor is init's child
    # and never a zombie of whoever started it.
    os.close(ready_r)
    os.setsid()
    if os.fork():
        os._exit(0)
    status = 0
    supervisor: Supervisor | None = None
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(log_path(layout, unit), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir("/")
        supervisor = Supervisor(layout, unit, spec, ready_w)
        supervisor.run()
    except BaseException as e:  # noqa: BLE001 - a detached process has nobody else to say it to
        sentence = e.sentence if isinstance(e, StepFailed) else (f"the supervisor of {unit} failed: "
                                                                 f"{type(e).__name__}: {e}")
        print(sentence, file=sys.stderr, flush=True)  # into UNIT.log, for a failure after the start
        # The starter is told only while it waits: once told "ok" the pipe is closed and its number may be reused.
        _tell(supervisor.ready if supervisor else ready_w, sentence)
        status = 1
    os._exit(status)


def _tell(fd: int | None, sentence: str) -> None:
    if fd is None:
        return
    try:
        os.write(fd, sentence.encode())
        os.close(fd)
    except OSError:
        pass


class Supervisor:
    def __init__(self, layout: Layout, unit: str, spec: ServiceSpec, ready: int | None):
        self.layout, self.unit, self.spec = layout, unit, spec
        self.ready = ready
        self.stopping = False
        self.restarts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.since = time.time()
        self.me = os.getpid()
        self.my_start = process_start(self.me)

    # -- what runs ------------------------------------------------------------

    def argv(self, env: dict[str, str]) -> list[str]:
        """ExecStart with its variables put in, and each absolute path that exists under the root put there
        (the program, --config)."""
        out = []
        for word in expand(self.spec.exec_start, env):
            if word.startswith("/") and not self.layout.real and self.layout.at(word).exists():
                out.append(str(self.layout.at(word)))
            else:
                out.append(word)
        return out

    def environment(self) -> dict[str, str]:
        env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"}
        if self.user():
            env["HOME"] = pwd.getpwnam(str(self.spec.user)).pw_dir
        if not self.layout.real:
            # The archive unpacks itself under the install's root, not in root's home.
            env["LLMGW_PYZ_CACHE"] = str(self.layout.cache)
        env.update(self.spec.environment)
        # As systemd reads them: after Environment=, in order, a later file's setting winning.
        for path, optional in self.spec.environment_files:
            try:
                env.update(read_environment(self.layout.at(path).read_text()))
            except FileNotFoundError:
                if not optional:
                    raise StepFailed("start the service", f"{self.unit} reads its environment from "
                                                          f"{self.layout.at(path)}, which is not there; write it "
                                                          "first (or mark it optional with EnvironmentFile=-)"
                                                          ) from None
        # Which unit this is, and under which root: what a program that upgrades itself hands its watchdog,
        # so that it restarts this very unit (llmgw.release.watchdog).
        env["LLMGW_UNIT"] = self.unit
        env["LLMGW_ROOT"] = str(self.layout.root)
        return env

    def user(self) -> dict[str, Any]:
        # An install into a directory runs llmgw's own units as whoever
        # installed it: their User= names the account the install makes on the
        # machine itself only. Accounts that Debian's packages made (postgres
        # for Patroni, etcd) are the machine's, there for a directory's install
        # too; and PostgreSQL refuses to run as root.
        if not self.spec.user or os.geteuid() != 0:
            return {}
        if not self.layout.real and (self.spec.user in INSTALL_MADE_USERS or not account_exists(self.spec.user)):
            return {}
        try:
            pwd.getpwnam(self.spec.user)
        except KeyError:
            raise StepFailed("start the service", f"{self.unit} runs as the user {self.spec.user}, which this "
                                                  f"machine lacks; make it (useradd --system {self.spec.user})"
                                                  ) from None
        # As systemd: without Group=, the user's own primary group (nobody's is nogroup, not "nobody").
        return {"user": self.spec.user, "group": self.spec.group or pwd.getpwnam(self.spec.user).pw_gid,
                "extra_groups": []}

    def spawn(self) -> None:
        env = self.environment()
        argv = self.argv(env)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=1, stderr=2, env=env,
                                         cwd="/", process_group=0, **self.user())
        except FileNotFoundError:
            raise StepFailed("start the service", f"{self.unit}: {argv[0]} does not exist; install the program "
                                                  "there first") from None
        except PermissionError:
            raise StepFailed("start the service", f"{self.unit}: {argv[0]} cannot be run (permission denied); "
                                                  "make it executable (chmod 0755)") from None
        # Opened at once, before anything could reap a child that exits at
        # its first instruction: a pidfd outlives the wait that reaps it,
        # a bare pid does not.
        if self.pidfd is not None:
            os.close(self.pidfd)
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.since = time.time()
        self.say(f"started {' '.join(argv)} as pid {self.proc.pid}")
        self.write_state("running")

    # -- the loop -------------------------------------------------------------

    def run(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._stop_asked)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.spawn()
        _tell(self.ready, "ok")
        self.ready = None
        while True:
            assert self.proc is not None
            status = self.wait_main(wake_r, None)
            if self.stopping:
                self.stop_main(wake_r)
                break
            assert status is not None
            self.say(f"pid {self.proc.pid} {self.described(status)}")
            if self.spec.kill_mode != "process":
                self.end_group(self.proc.pid, signal.SIGTERM)
            if not self.restarts_after(status):
                self.write_state("exited", last_exit=self.described(status))
                return
            self.write_state("restarting", last_exit=self.described(status))
            if self.pause(wake_r, self.spec.restart_sec):
                break
            self.restarts += 1
            self.spawn()
        self.say("stopped")
        state_path(self.layout, self.unit).unlink(missing_ok=True)

    def _stop_asked(self, signum: int, frame: object) -> None:
        self.stopping = True

    def wait_main(self, wake_r: int, timeout: float | None) -> int | None:
        """The main process's exit status once it ends, or None when asked to stop (or past `timeout`)."""
        assert self.proc is not None and self.pidfd is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.pidfd, wake_r], [], [], left)
            if self.pidfd in ready:
                return self.proc.wait()
            if wake_r in ready:
                os.read(wake_r, 512)
                if self.stopping and timeout is None:
                    return None
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def pause(self, wake_r: int, seconds: float) -> bool:
        """RestartSec, cut short by a stop: True when asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([wake_r], [], [], left)
            if ready:
                os.read(wake_r, 512)
        return True

    def restarts_after(self, status: int) -> bool:
        if status in self.spec.restart_prevent_exit_status:
            return False
        mode = self.spec.restart
        return (mode == "always" or (mode == "on-failure" and status != 0)
                or (mode in ("on-abnormal", "on-abort") and status < 0))

    # -- stopping -------------------------------------------------------------

    def stop_main(self, wake_r: int) -> None:
        """Stop as KillMode= says: control-group signals the whole group, mixed and process the main one first."""
        assert self.proc is not None
        pid = self.proc.pid
        self.write_state("stopping")
        if self.proc.poll() is None:
            if self.spec.kill_mode == "control-group":
                _killpg(pid, signal.SIGTERM)
            else:
                _kill(pid, signal.SIGTERM)
            if self.wait_main(wake_r, self.spec.timeout_stop_sec) is None and self.proc.poll() is None:
                self.say(f"pid {pid} did not stop in {self.spec.timeout_stop_sec:g} s; killing it")
                _kill(pid, signal.SIGKILL)
                self.proc.wait()
        if self.spec.kill_mode == "control-group":
            self.end_group(pid, None)
        elif self.spec.kill_mode == "mixed":
            # systemd's mixed: SIGTERM to the main process, SIGKILL to what is left of the unit.
            _killpg(pid, signal.SIGKILL)
            _wait_gone(pid)

    def end_group(self, pgid: int, first: signal.Signals | None) -> None:
        """What is left of the process group `pgid`: `first` (if any), then SIGKILL past TimeoutStopSec."""
        if first is not None:
            _killpg(pgid, first)
        _wait_gone(pgid, self.spec.timeout_stop_sec)
        _killpg(pgid, signal.SIGKILL)
        _wait_gone(pgid)

    # -- records --------------------------------------------------------------

    def described(self, status: int) -> str:
        return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"

    def write_state(self, state: str, **extra: Any) -> None:
        doc = {"unit": self.unit, "state": state, "supervisor": self.me, "supervisor_start": self.my_start,
               # returncode, not poll(): polling would reap the child here.
               "pid": self.proc.pid if self.proc and self.proc.returncode is None else None,
               "since": self.since, "restarts": self.restarts, **extra}
        write_atomic(state_path(self.layout, self.unit), (json.dumps(doc) + "\n").encode(), 0o644)

    def say(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        print(f"{stamp} llmgw supervise {self.unit}: {line}", file=sys.stderr, flush=True)


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_running(pgid: int) -> bool:
    """Whether a process of the group `pgid` still runs. A zombie does not: it is dead, waiting for a parent
    (init, for what outlived the unit's main process) to read its status, and killpg(pgid, 0) still finds it."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _wait_gone(pgid: int, timeout: float = 10.0) -> None:
    """Until no process of the group runs, or `timeout`: a signal is delivered when its target next runs, so a
    stop that returned at once after SIGKILL could be read, on a busy machine, with the processes still there."""
    deadline = time.monotonic() + timeout
    while _group_running(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)  # nothing to wait on for processes that are not our children
