"""Ending a child the test started: by its own PID, never by name."""

from __future__ import annotations

import os
import signal
import subprocess
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
