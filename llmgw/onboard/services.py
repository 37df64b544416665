"""The one seam where a real machine and a test differ: who keeps the services running.

Two real implementations. `systemd` on a machine booted with it (the units of
systemd/ in /etc/systemd/system, `systemctl enable --now`); `supervised`
everywhere else (a container, a machine without systemd, an install into a
test's directory): a detached supervisor per unit (onboard/supervisor.py)
that honours the unit's ExecStart, Restart, RestartSec, KillMode and
Environment. The installer, the upgrade and the console call only this.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from llmgw.files import write_atomic
from llmgw.onboard import supervisor
from llmgw.onboard.layout import Layout
from llmgw.onboard.steps import StepFailed
from llmgw.onboard.units import parse_service, units_dir

KINDS = ("systemd", "supervised")


@dataclass
class ServiceStatus:
    unit: str
    active: bool
    pid: int | None
    since: float | None  # when the running process started (Unix time)
    detail: str  # what a person reads: "running", "restarting after: exited with status 1", …


class ServiceManager(Protocol):
    kind: str  # "systemd" | "supervised"

    def install(self, unit: str) -> bool:
        """Put systemd/UNIT in place for this layout; True if that changed anything."""

    def start(self, unit: str, block: bool = True) -> None:
        """Enable and start; a unit already running is left as it is. `block=False` returns without waiting
        for a unit that says when it is ready (Type=notify: etcd is ready once a second member runs)."""

    def restart(self, unit: str) -> None: ...

    def stop(self, unit: str) -> None: ...

    def status(self, unit: str) -> ServiceStatus: ...


# Where Debian's packages put their units (etcd, Patroni, keepalived): systemd
# runs them from there; the supervised manager reads a copy of each, so both
# run the same unit.
VENDOR_UNITS = Path("/lib/systemd/system")


def self_command() -> list[str]:
    """This very program: the archive under the zipapp, `-m llmgw` in a checkout."""
    pyz = os.environ.get("LLMGW_PYZ")
    return [sys.executable, pyz] if pyz else [sys.executable, "-m", "llmgw"]


def _install_text(layout: Layout, sources: Path | None, unit: str) -> bool:
    source = (sources or units_dir()) / unit
    try:
        text = source.read_bytes()
    except OSError:
        raise StepFailed("install the service", f"there is no unit {unit} in {source.parent}; "
                                                "name one of its .service files") from None
    dest = layout.unit_file(unit)
    if dest.exists() and dest.read_bytes() == text:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, text, 0o644)
    return True


class SystemdManager:
    """systemd on a real machine; kept thin: each call is one systemctl command."""

    kind = "systemd"

    def __init__(self, layout: Layout, sources: Path | None = None):
        if not layout.real:
            raise StepFailed("install the service", f"systemd manages the machine itself, not {layout.root}; "
                                                    "an install into a directory uses --services supervised")
        self.layout, self.sources = layout, sources

    def install(self, unit: str) -> bool:
        changed = _install_text(self.layout, self.sources, unit)
        if changed:
            self._systemctl("daemon-reload")
        return changed

    def start(self, unit: str, block: bool = True) -> None:
        self._systemctl("enable", "--now", *(() if block else ("--no-block",)), unit)

    def restart(self, unit: str) -> None:
        self._systemctl("restart", unit)

    def stop(self, unit: str) -> None:
        self._systemctl("stop", unit)

    def status(self, unit: str) -> ServiceStatus:
        shown = self._systemctl("show", unit, "--timestamp=unix",
                                "--property=ActiveState,SubState,MainPID,ExecMainStartTimestamp")
        values = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
        pid = int(values.get("MainPID", "0") or 0) or None
        stamp = values.get("ExecMainStartTimestamp", "").lstrip("@")
        since = float(stamp) if stamp.replace(".", "", 1).isdigit() else None
        active = values.get("ActiveState") == "active"
        return ServiceStatus(unit, active, pid, since,
                             f"{values.get('ActiveState', 'unknown')} ({values.get('SubState', 'unknown')})")

    def _systemctl(self, *args: str) -> str:
        try:
            done = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            raise StepFailed("start the service", "systemctl is not on this machine; "
                                                  "use --services supervised") from None
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise StepFailed("start the service", f"systemctl {' '.join(args)} failed: {said}; "
                                                  f"see journalctl -u {args[-1]}")
        return done.stdout


class SupervisedManager:
    """A detached supervisor per unit: for machines without systemd, and for installs into a directory."""

    kind = "supervised"

    def __init__(self, layout: Layout, sources: Path | None = None, program: list[str] | None = None):
        self.layout, self.sources = layout, sources
        self.program = program or self_command()

    def install(self, unit: str) -> bool:
        return _install_text(self.layout, self.sources, unit)

    def start(self, unit: str, block: bool = True) -> None:
        # A supervised unit is started once its process is: there is no readiness to wait for either way.
        if self.status(unit).active:
            return
        if not self.layout.unit_file(unit).exists():
            raise StepFailed("start the service", f"{unit} is not installed in {self.layout.units}; "
                                                  "install it first")
        done = subprocess.run([*self.program, "onboard", "supervise", "--root", str(self.layout.root), unit],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            said = done.stderr.strip().removeprefix("llmgw: ") or f"exit status {done.returncode}"
            raise StepFailed("start the service", f"{unit} did not start: {said}")

    def restart(self, unit: str) -> None:
        self.stop(unit)
        self.start(unit)

    def stop(self, unit: str) -> None:
        state = supervisor.read_state(self.layout, unit)
        if not supervisor.supervisor_alive(state):
            supervisor.state_path(self.layout, unit).unlink(missing_ok=True)
            return
        assert state is not None
        pid = state["supervisor"]
        spec = parse_service(self.layout.unit_file(unit).read_text(), unit)
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            # The supervisor waits TimeoutStopSec for the unit, then kills it.
            ready, _, _ = select.select([pidfd], [], [], spec.timeout_stop_sec + 30)
        finally:
            os.close(pidfd)
        if not ready:
            raise StepFailed("stop the service", f"the supervisor of {unit} (pid {pid}) did not stop in "
                                                 f"{spec.timeout_stop_sec + 30:g} s; see "
                                                 f"{supervisor.log_path(self.layout, unit)}")

    def status(self, unit: str) -> ServiceStatus:
        state = supervisor.read_state(self.layout, unit)
        # "exited" is the supervisor's last word before it ends itself: the
        # same answer whether it is read in that moment or after, which a
        # test under load once read in between.
        if not supervisor.supervisor_alive(state) or (state and state.get("state") == "exited"):
            last = f" (last: {state['last_exit']})" if state and state.get("last_exit") else ""
            return ServiceStatus(unit, False, None, None, f"not running{last}")
        assert state is not None
        running = state.get("state") == "running" and state.get("pid")
        detail = state.get("state", "unknown")
        if state.get("last_exit") and not running:
            detail = f"{detail} after: {state['last_exit']}"
        return ServiceStatus(unit, bool(running), state.get("pid") if running else None,
                             state.get("since") if running else None, detail)


def default_kind(layout: Layout) -> str:
    """systemd where it runs the machine; supervised for a directory or a machine without it."""
    return "systemd" if layout.real and Path("/run/systemd/system").is_dir() else "supervised"


def service_manager(layout: Layout, kind: str | None = None, sources: Path | None = None) -> ServiceManager:
    """The manager for `layout`: `kind` as given, else the default for it. `sources` replaces systemd/ (tests)."""
    kind = kind or default_kind(layout)
    if kind == "systemd":
        return SystemdManager(layout, sources)
    if kind == "supervised":
        return SupervisedManager(layout, sources)
    raise StepFailed("install the service", f"there is no service manager {kind!r}; use one of {', '.join(KINDS)}")


def install_server_units(manager: ServiceManager, server_unit: str) -> bool:
    """The control plane's unit, and under systemd the upgrade helper's (llmgw.release.helper): systemd runs
    the control plane as llmgw, which cannot replace its own program. True if anything changed."""
    from llmgw.release import HELPER_UNITS

    changed = manager.install(server_unit)
    if manager.kind == "systemd":
        for unit in HELPER_UNITS:
            changed = manager.install(unit) or changed
        manager.start(HELPER_UNITS[-1])  # the .path: enabled, and watching from now on
    return changed


def wait_active(manager: ServiceManager, unit: str, timeout: float = 30.0) -> ServiceStatus:
    """The unit's status once it is active, or StepFailed past `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status = manager.status(unit)
        if status.active or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if not status.active:
        raise StepFailed("start the service", f"{unit} is not running ({status.detail}) after {timeout:g} s")
    return status
