"""What the agent keeps on disk about each engine it runs, so a restarted agent can adopt it.

One directory per shard under `<data_dir>/shards/`: `record.json` (below)
and `output.log` (output.py). The record is written whole to a temporary
file, synced and renamed over the old one: an agent killed mid-write leaves
the old record or the new, never half of one — a half record would be an
engine nobody adopts and nobody stops, holding its GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from llmgw.files import write_atomic

RECORD = "record.json"
OUTPUT = "output.log"

# A shard id names a directory: nothing that could climb out of shards/.
_SHARD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class RecordError(ValueError):
    pass


def check_shard_id(shard_id: str) -> None:
    if not _SHARD_ID.match(shard_id or "") or ".." in shard_id:
        raise RecordError(
            f"the shard id {shard_id!r} cannot name a directory: use letters, digits and . _ : - (at most 128)")


@dataclass
class ShardRecord:
    shard_id: str
    pid: int
    pgid: int
    create_time: float
    """When the engine started (Unix seconds, psutil's create_time): for people; moves with the clock."""
    command: list[str]
    boot_start: float = 0.0
    """Seconds after boot the engine started (exact to the clock tick): with pid and boot_id, what tells it from a
    later process given the same pid."""
    boot_id: str = ""
    port: int = 0
    url: str = ""
    model: str = ""
    started_at: float = 0.0
    user: str = ""
    api_key_file: str = ""
    """Where the engine's API key is, for the readiness check of an adopted engine; never the key itself."""
    mark: str = ""
    """The value of LLMGW_ENGINE_RUN in the engine's environment, which every process it starts inherits."""
    kv_events: str = ""
    """Where the engine publishes its KV-cache events, followed again by an agent that adopts it."""
    health_path: str = "/health"
    """Where the engine says it is up, for the readiness check of an adopted engine (supervisor/readiness.py)."""
    descendants: list[tuple[int, float]] = field(default_factory=list)
    """(pid, create_time) of processes the engine started, as last seen: one that left the group and lost its
    parent is found by no walk of the tree, and must still be stopped."""


def shard_dir(data_dir: Path, shard_id: str) -> Path:
    check_shard_id(shard_id)
    return data_dir / "shards" / shard_id


def write(data_dir: Path, record: ShardRecord) -> None:
    directory = shard_dir(data_dir, record.shard_id)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / RECORD, json.dumps(asdict(record), indent=1).encode(), 0o600)


def remove(data_dir: Path, shard_id: str) -> None:
    """Forget a shard's engine (it ended); its output file stays for `ctl logs` until the shard id is reused."""
    try:
        (shard_dir(data_dir, shard_id) / RECORD).unlink()
    except FileNotFoundError:
        pass


def read_all(data_dir: Path) -> tuple[list[ShardRecord], list[tuple[Path, str]]]:
    """Every record kept, and each file that is not one with why (the caller removes those)."""
    root = data_dir / "shards"
    records: list[ShardRecord] = []
    problems: list[tuple[Path, str]] = []
    if not root.is_dir():
        return records, problems
    names = {f.name for f in fields(ShardRecord)}
    for path in sorted(root.glob(f"*/{RECORD}")):
        try:
            raw = json.loads(path.read_bytes())
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            raw = {k: v for k, v in raw.items() if k in names}
            record = ShardRecord(**raw)
            record.descendants = [(int(p), float(t)) for p, t in record.descendants]
            check_shard_id(record.shard_id)
            if path.parent.name != record.shard_id:
                raise ValueError(f"it names shard {record.shard_id!r}")
            if not isinstance(record.command, list) or not record.pid or record.pid <= 1:
                raise ValueError("it has no command or pid")
        except (OSError, ValueError, TypeError) as e:
            problems.append((path, f"{path} is not a shard record ({e})"))
            continue
        records.append(record)
    return records, problems
