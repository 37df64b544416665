"""Which processes are an engine's, told apart from anything else that holds the same numbers.

A PID alone names a process only until it ends: an engine that died while
the agent was away may have its PID given to somebody's shell, and an agent
that signalled the number would kill it. So a process is known by its PID
*and* its start time counted from boot (exact to the clock tick, and unmoved
by a clock step, which the epoch create_time is not), within one boot
(`boot_id`: PIDs start again after a reboot).

An engine's processes are more than its group: a worker that called setsid
(Strata's does) is in a session of its own, and signalling the group misses
it — it then holds the card and the RAM the next replica needs (the
original's N2). They are found by walking the tree from the leader, by the
group, by the descendants seen earlier, and — for one whose parent died
before anybody looked, which belongs to init and to no tree of ours — by
a variable in its environment that every process the engine starts
inherits (MARK, one value per run of the engine).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import psutil

# One clock tick at the usual 100 Hz, and some: two processes with one PID
# within a tick of each other cannot both be alive.
_TICK = 0.011

MARK = "LLMGW_ENGINE_RUN"


@dataclass(frozen=True)
class Ident:
    pid: int
    start: float
    """Seconds since boot when the process started (/proc/PID/stat's starttime)."""


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def start_of(pid: int) -> float:
    """Seconds after boot the process started; raises psutil.NoSuchProcess when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    # The command name, in parentheses, may hold spaces and parentheses itself.
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[19]) / _HZ


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def ident(p: psutil.Process) -> Ident:
    return Ident(p.pid, start_of(p.pid))


def find(i: Ident) -> psutil.Process | None:
    """The process, if it is still the one identified and has not ended; None otherwise."""
    try:
        p = psutil.Process(i.pid)
        if abs(start_of(p.pid) - i.start) > _TICK:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def gone(p: psutil.Process) -> bool:
    """Ended: no longer running, or a zombie waiting for a parent that is not us to reap it."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return True


def pgid_of(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return 0


def group_is_ours(leader: Ident, pgid: int) -> bool:
    """Whether the process group numbered pgid is still the engine's.

    The kernel gives no new process a PID still in use as a group's number,
    so while any member lives the number is ours. Once a process other
    than our leader holds that PID, our group had emptied and the number
    belongs to somebody else's.
    """
    if pgid <= 1 or pgid == os.getpgrp():
        return False  # never the agent's own group, whatever a record says
    try:
        p = psutil.Process(pgid)
    except psutil.NoSuchProcess:
        return True  # the leader ended; members left, if any, are still ours
    except psutil.AccessDenied:
        return False
    try:
        return abs(start_of(p.pid) - leader.start) <= _TICK
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return True


def engine_processes(leader: Ident, pgid: int, known: list[Ident], mark: str = "") -> list[psutil.Process]:
    """Every live process of the engine: the leader, its descendants whatever their group, the rest of its
    group, the descendants seen before that are still the same processes, and (given `mark`, which reads
    every process's environment: for a stop, not for a poll) the processes that carry the engine's mark."""
    found: dict[int, psutil.Process] = {}

    def add(p: psutil.Process) -> None:
        if p.pid not in found and p.pid != os.getpid() and not gone(p):
            found[p.pid] = p

    root = find(leader)
    if root is not None:
        add(root)
        try:
            for child in root.children(recursive=True):
                add(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    if group_is_ours(leader, pgid):
        for pid in psutil.pids():
            if pid not in found and pgid_of(pid) == pgid:
                try:
                    p = psutil.Process(pid)
                    # A member of our group started after our leader did.
                    if start_of(p.pid) + _TICK >= leader.start:
                        add(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
    for i in known:
        if i.pid not in found:
            again = find(i)
            if again is not None:
                add(again)
    if mark:
        for p in marked(mark, leader.start, skip=found):
            add(p)
    # A stray's own descendants (a worker that left and then forked) are the engine's too.
    for p in list(found.values()):
        if p.pid != leader.pid and pgid_of(p.pid) != pgid:
            try:
                for child in p.children(recursive=True):
                    add(child)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    return list(found.values())


def marked(mark: str, since: float, skip: dict[int, psutil.Process] | None = None) -> list[psutil.Process]:
    """Processes started no earlier than `since` whose environment has MARK=mark."""
    needle = f"\0{MARK}={mark}\0".encode()
    out = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me or (skip and pid in skip):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if needle not in env:
            continue
        try:
            p = psutil.Process(pid)
            if start_of(p.pid) + _TICK >= since:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def signal_all(leader: Ident, pgid: int, procs: list[psutil.Process], sig: signal.Signals) -> None:
    """Signal the engine's group (what forked since it was looked at too) and each process found, and the
    group of each one that leads a group of its own."""
    if group_is_ours(leader, pgid):
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for p in procs:
        try:
            own = pgid_of(p.pid)
            # psutil checks the process is still the one it found before signalling it.
            p.send_signal(sig)
            if own == p.pid and own != pgid:
                os.killpg(own, sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            pass


def descendants(leader: Ident, pgid: int) -> list[Ident]:
    """The engine's processes other than its leader, as they are now, for the record."""
    out = []
    for p in engine_processes(leader, pgid, []):
        if p.pid == leader.pid:
            continue
        try:
            out.append(ident(p))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return sorted(out, key=lambda i: i.pid)
