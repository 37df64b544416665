"""The checks before anything is installed: system, room, clock, ports, and whether the machines reach one another.

Each check is a sentence a person can act on. A failed one stops the install
before it starts; a warning is shown and the install may go on. This
machine's checks are read here; another machine's are the same functions run
there over SSH (llmgw/onboard/ssh.py), their answers gathered into one list.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GB = 1 << 30
# An install with a small model: the program, the store, a 0.5 B GGUF and its engine.
NEED_DISK = 4 * GB
NEED_MEMORY = 2 * GB
# Farther apart than this, the cluster's certificates and leases disagree about what time it is.
CLOCK_SKEW_S = 2.0
ARCHITECTURES = ("x86_64", "aarch64")


@dataclass(frozen=True)
class Check:
    machine: str
    name: str  # "system" | "room" | "clock" | "ports" | "reach"
    state: str  # "ok" | "warn" | "fail"
    sentence: str


def system(machine: str) -> list[Check]:
    out = []
    osr = _os_release()
    distro = osr.get("PRETTY_NAME", platform.system())
    debian = "debian" in (osr.get("ID", "") + " " + osr.get("ID_LIKE", "")).lower()
    if platform.system() != "Linux":
        out.append(Check(machine, "system", "fail", f"{distro} is not Linux; llmgw installs on Debian or Ubuntu."))
    elif not debian:
        out.append(Check(machine, "system", "warn", f"{distro}: not Debian-like; the install is tried on "
                                                    "Debian and Ubuntu only."))
    else:
        out.append(Check(machine, "system", "ok", f"{distro}"))
    py = sys.version_info
    if py < (3, 11):
        out.append(Check(machine, "system", "fail", f"Python {py.major}.{py.minor} is older than 3.11; "
                                                    "install python3.11 or newer."))
    else:
        out.append(Check(machine, "system", "ok", f"Python {py.major}.{py.minor}.{py.micro}"))
    arch = platform.machine()
    out.append(Check(machine, "system", "ok" if arch in ARCHITECTURES else "warn",
                     arch if arch in ARCHITECTURES else f"{arch}: engines are built for x86_64 and aarch64 only."))
    return out


def room(machine: str, where: Path) -> list[Check]:
    """Free disk where the install writes (the nearest existing folder), and the machine's memory."""
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    disk = (Check(machine, "room", "ok", f"{free / GB:.1f} GB free on {probe}") if free >= NEED_DISK else
            Check(machine, "room", "fail", f"only {free / GB:.1f} GB free on {probe}; the install and a small "
                                            f"model need {NEED_DISK // GB} GB: free some room."))
    memory = _memory_total()
    if memory is None:
        mem = Check(machine, "room", "warn", "the memory could not be read (/proc/meminfo)")
    elif memory < NEED_MEMORY:
        mem = Check(machine, "room", "fail", f"{memory / GB:.1f} GB of memory; a control plane with a small "
                                             f"model needs {NEED_MEMORY // GB} GB.")
    else:
        mem = Check(machine, "room", "ok", f"{memory / GB:.1f} GB of memory, {os.cpu_count() or 1} cores")
    return [disk, mem]


def clock(machine: str, their_time: float | None = None, ours: float | None = None) -> Check:
    """This machine's clock, or another's against this one (their_time, read there; ours, read here meanwhile)."""
    if their_time is None:
        synced = _clock_synchronized()
        if synced is False:
            return Check(machine, "clock", "warn", "the clock is not synchronised (NTP); certificates and "
                                                   "leases need the machines' clocks to agree.")
        return Check(machine, "clock", "ok", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    skew = their_time - (ours if ours is not None else time.time())
    if abs(skew) > CLOCK_SKEW_S:
        return Check(machine, "clock", "fail", f"its clock is {abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} "
                                               "this machine's; turn on NTP (timedatectl set-ntp true) on both.")
    return Check(machine, "clock", "ok", f"within {abs(skew):.1f} s of this machine")


def ports(machine: str, listen: dict[str, str]) -> list[Check]:
    """Each listener's port free to bind here."""
    out = []
    for role, address in listen.items():
        host, _, port_text = address.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"  # noqa: S104 - what the listener itself will bind
        try:
            port = int(port_text)
        except ValueError:
            out.append(Check(machine, "ports", "fail", f"the {role} listener {address!r} has no port; "
                                                       "write it as HOST:PORT or :PORT."))
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.bind((host, port))
        except OSError as e:
            taken = e.errno == 98  # EADDRINUSE
            out.append(Check(machine, "ports", "fail",
                             f"port {port} ({role}) is {'taken' if taken else 'not free'} on {host}: "
                             f"{'stop what listens there, or choose another port' if taken else e.strerror}."))
        else:
            out.append(Check(machine, "ports", "ok", f"port {port} ({role}) is free"))
        finally:
            s.close()
    return out


def reach(machine: str, host: str, port: int, timeout: float = 3.0) -> Check:
    """Whether this machine opens a connection to HOST:PORT."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        return Check(machine, "reach", "fail", f"{host}:{port} cannot be reached from {machine} "
                                               f"({e.strerror or e}); check the network and its firewall.")
    return Check(machine, "reach", "ok", f"reaches {host}:{port}")


def this_machine(listen: dict[str, str], root: Path) -> list[Check]:
    name = "this machine"
    if (root / "etc/llmgw/server.yaml").exists():
        # Run again over an install: its own server holds the ports, and each step says "unchanged".
        held = [Check(name, "ports", "ok", "llmgw is installed here already; its server holds its ports")]
    else:
        held = ports(name, listen)
    return [*system(name), *room(name, root), clock(name), *held]


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.state == "fail"]


def _os_release() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip('"')
    return out


def _memory_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _clock_synchronized() -> bool | None:
    """What the kernel says of NTP (adjtimex's unsynchronised flag), None when it cannot say."""
    try:
        import ctypes
        import ctypes.util

        # struct timex is larger than 200 bytes on every Linux; its first int is `modes` (0: read only).
        buf = ctypes.create_string_buffer(512)
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        state = libc.adjtimex(buf)
    except (OSError, AttributeError):
        return None
    TIME_ERROR = 5
    return state != TIME_ERROR
