"""Engines for the supervisor's tests, and waiting on what they do.

The engines are real processes: `python -m llmgw sim-engine`, and small
Python scripts written into the test's directory for the ones that
misbehave (fork a worker that leaves the group, ignore SIGTERM, die).
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path

import psutil

from llmgw.agent.supervisor import EngineSpec, Supervisor
from tests.support.pgcluster import free_port


def sim_spec(shard_id: str = "s1", model: str = "tiny") -> EngineSpec:
    port = free_port()
    return EngineSpec(shard_id=shard_id, model=model, url=f"http://127.0.0.1:{port}", port=port,
                      command=[sys.executable, "-m", "llmgw", "sim-engine", "--port", str(port), "--model", model])


def script_spec(tmp_path: Path, shard_id: str, source: str, model: str = "none") -> EngineSpec:
    """An engine that is a Python script, written now.

    Rewrite tmp_path/<shard_id>.py before starting it to change it.
    """
    path = tmp_path / f"{shard_id}.py"
    path.write_text(textwrap.dedent(source))
    port = free_port()
    return EngineSpec(shard_id=shard_id, model=model, url=f"http://127.0.0.1:{port}", port=port,
                      command=[sys.executable, "-u", str(path)])


async def next_state(sup: Supervisor, shard_id: str, state: str, timeout: float = 20):
    """The first status of shard_id in `state` from the supervisor's changes."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise AssertionError(f"shard {shard_id} did not become {state} in {timeout} s: "
                                 f"{[s for s in sup.statuses()]}")
        try:
            status = await asyncio.wait_for(sup.changes.get(), timeout=left)
        except TimeoutError:
            continue
        if status.shard_id == shard_id and status.state == state:
            return status


async def wait_for_file(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

