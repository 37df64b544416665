"""A child the test started: its first line read, and its end by its own PID, never by name."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import Any


def end(proc: subprocess.Popen[Any], grace: float = 10) -> tuple[Any, Any]:
    """SIGTERM to `proc`, SIGKILL if it is still there after `grace` seconds; what it left on its pipes."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.communicate()


def first_line(fd: int, timeout: float) -> bytes:
    """What a child wrote to the pipe `fd` up to its first newline (however many reads the pipe takes to hand it
    over), or what it had written when it closed the pipe or `timeout` ran out."""
    line, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and b"\n" not in line:
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            line += chunk
    return line
