"""Supervisors over a data dir of the test's own; helpers are in supervised.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from llmgw.agent.supervisor import Supervisor


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def supervisor(data_dir):
    """A supervisor running engines as the test's own user; whatever it still runs is stopped after."""
    sup = Supervisor(data_dir, user=None)
    yield sup
    await sup.stop_all(grace_s=2)
    await sup.close()


@pytest.fixture
def reap():
    """PIDs a test started outside a supervisor, killed after it whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
