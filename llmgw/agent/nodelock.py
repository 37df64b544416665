"""One agent per node identity on a machine: an flock on DATA_DIR/agent.lock.

Two agents on one data directory both adopt the engines its records name,
and each stops the other's when it stops: a second `build.py run` on the
same ./var took the first run's sim engine down this way (issue 11). The
identity (the node's certificate) and the engine records both live in the
data directory, so a lock there covers every agent that could share them.

The lock, not the file, says whether an agent runs: the kernel lets go of
an flock when its holder dies, however it dies, so the file an agent killed
with SIGKILL leaves behind never blocks the next one. The pid written in it
is only for the sentence to whoever started the second agent.
"""

from __future__ import annotations

import fcntl
import os

LOCK_NAME = "agent.lock"


class AgentAlreadyRunning(Exception):
    """Another agent holds this node's lock; the message says which and what to do."""


class NodeLock:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, LOCK_NAME)
        self.fd = -1

    def take(self, node: str) -> None:
        """Hold the lock for this process, or raise AgentAlreadyRunning naming the holder's pid."""
        # Without O_TRUNC, so that a refused agent leaves the holder's pid in
        # place; close-on-exec, so that engines started by the agent do not
        # hold the lock after it has gone (that would refuse its restart,
        # which must adopt them).
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            written = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            holder = f"pid {written}" if written.isdigit() else "a process that has not yet written its pid"
            raise AgentAlreadyRunning(
                f"another agent with this node's identity ({node}) is already running on this machine "
                f"({holder}, holding {self.path}); two would each stop the other's engines. "
                f"Stop that one first (`kill {written if written.isdigit() else 'PID'}`), "
                f"or give this one its own data_dir and join it as another node") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor lets go of the flock
            self.fd = -1
