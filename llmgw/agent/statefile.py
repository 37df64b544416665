"""What the agent is doing, kept on disk for the node's overview (`sudo llmgw` on a node).

The node's overview must work with no admin token and while the control
plane is out of reach, so it cannot ask the cluster; and the agent's own
log ring (ownlog.py) is in the agent's memory. So the agent writes two
small files in its data directory, which root reads on the same machine:

- `agent-state.json`, rewritten whole every few seconds: its pid, version,
  when it started, the control plane it is connected to and since when,
  the control planes it knows (agent.yaml's and those the leader sent),
  and its cards.
- `agent-warnings.log`, one JSON line per warning or error it logged,
  cut to its last lines when it grows past a bound, so a node that logs
  the same warning all week does not fill its disk.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmgw.files import write_atomic

STATE = "agent-state.json"
WARNINGS = "agent-warnings.log"
WARNINGS_MAX_BYTES = 256 << 10  # past this the file is cut to its newer half
WRITE_EVERY = 3.0  # seconds, as often as the overview refreshes


@dataclass
class AgentState:
    pid: int
    version: str
    node: str
    node_id: str
    started_at: float
    leader: str = ""  # the control plane connected to; "" while none answers
    since: float = 0.0  # when `leader` last changed (connected, or lost)
    control_planes: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)  # index, name, memory_mb; busy, used, heat when sampled
    shard_gpus: dict[str, list[int]] = field(default_factory=dict)  # shard id -> its GPUs, when this agent started it
    written_at: float = 0.0


def write_state(data_dir: str, state: AgentState) -> None:
    state.written_at = time.time()
    write_atomic(Path(data_dir) / STATE, json.dumps(asdict(state)).encode(), 0o600)


def read_state(data_dir: str) -> AgentState | None:
    """The state the agent last wrote, or None when it never has (or the file is not one)."""
    try:
        raw = json.loads((Path(data_dir) / STATE).read_bytes())
        return AgentState(**{k: v for k, v in raw.items() if k in AgentState.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


class WarningsFile(logging.Handler):
    """A logging handler that appends each warning and error to agent-warnings.log."""

    def __init__(self, data_dir: str, max_bytes: int = WARNINGS_MAX_BYTES) -> None:
        super().__init__(logging.WARNING)
        self.path = Path(data_dir) / WARNINGS
        self.max_bytes = max_bytes

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps({"at": record.created, "level": record.levelname.lower(),
                               "text": f"{record.name}: {record.getMessage()}"}) + "\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            if self.path.stat().st_size > self.max_bytes:
                data = self.path.read_bytes()
                kept = data[len(data) // 2:]
                write_atomic(self.path, kept[kept.find(b"\n") + 1:], 0o600)
        except Exception:  # noqa: BLE001 - a full disk must not take the agent's logging down with it
            self.handleError(record)


def recent_warnings(data_dir: str, within: float = 3600.0, now: float | None = None) -> list[dict[str, Any]]:
    """The warnings and errors the agent logged in the last `within` seconds, oldest first."""
    cutoff = (now if now is not None else time.time()) - within
    try:
        text = (Path(data_dir) / WARNINGS).read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and float(entry.get("at", 0)) >= cutoff:
            found.append(entry)
    return found
