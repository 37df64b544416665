"""What a placement pass decided, as actions the reconciler carries out in order.

The pass itself does nothing: the reconciler (on the leader) writes each
Start as a replica row and sends StartShard, sends StopShard for each Stop
and marks the row desired "stop", marks each Lost replica failed, and so
on. Actions are in the order they should be done in: Lost first (their room
is free again), then Stops, then Starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from llmgw.protocol import EngineProfile, StartShard
from llmgw.store import Replica


@dataclass(frozen=True)
class Start:
    """Start shard `shard_id` of `model` on `node_id`, on profile `profile_index` (what `profile` says)."""

    shard_id: str
    model: str
    node_id: str
    profile_index: int
    profile: EngineProfile
    profile_hash: str
    cpu_cores: int = 0
    memory_mb: int = 0
    gpus: tuple[int, ...] = ()
    gpu_memory_mb: int = 0  # on each card; 0 is the whole card
    replaces: str | None = None
    """The replica this one takes over from: stopped by a later pass once this one is ready."""
    reason: str = ""

    def replica(self, now: float) -> Replica:
        """The row to write before StartShard is sent: pending until the agent answers."""
        return Replica(
            id=self.shard_id, model=self.model, node_id=self.node_id, state="pending", profile=self.profile_index,
            desired="run", since=now, created_at=now, profile_hash=self.profile_hash, cpu_cores=self.cpu_cores,
            memory_mb=self.memory_mb, gpus=list(self.gpus), gpu_memory_mb=self.gpu_memory_mb,
            replaces=self.replaces, message=self.reason,
        )

    def message(self, startup_timeout_s: float = 600.0) -> StartShard:
        return StartShard(shard_id=self.shard_id, profile=self.profile, startup_timeout_s=startup_timeout_s)


@dataclass(frozen=True)
class Stop:
    """Stop shard `shard_id` (StopShard with `grace_s`) and mark its row desired "stop"."""

    shard_id: str
    model: str
    node_id: str
    reason: str
    grace_s: float = 30.0


@dataclass(frozen=True)
class Lost:
    """A replica whose node is lost (or gone): mark it failed; its replacement is placed in the same plan."""

    shard_id: str
    model: str
    node_id: str
    reason: str


@dataclass(frozen=True)
class Wait:
    """A replica `model` wants that cannot be placed now, and why (what `ctl models` and a waiting request say)."""

    model: str
    reason: str


@dataclass(frozen=True)
class Purge:
    """Send RemoveWeights(sources) to `node_id`: a model removed with --purge, whose replicas have all stopped."""

    node_id: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Forget:
    """Delete the removed model's row: nothing of it runs any more."""

    model: str


Action = Start | Stop | Lost | Wait | Purge | Forget
_A = TypeVar("_A", Start, Stop, Lost, Wait, Purge, Forget)
_ORDER = {Lost: 0, Stop: 1, Start: 2, Purge: 3, Forget: 4, Wait: 5}


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)

    def add(self, action: Action) -> None:
        self.actions.append(action)

    def ordered(self) -> list[Action]:
        return sorted(self.actions, key=lambda a: _ORDER[type(a)])

    def of(self, kind: type[_A]) -> list[_A]:
        return [a for a in self.actions if isinstance(a, kind)]

    @property
    def starts(self) -> list[Start]:
        return self.of(Start)

    @property
    def stops(self) -> list[Stop]:
        return self.of(Stop)

    @property
    def lost(self) -> list[Lost]:
        return self.of(Lost)

    @property
    def waits(self) -> list[Wait]:
        return self.of(Wait)

    def for_model(self, model: str) -> list[Action]:
        return [a for a in self.actions if getattr(a, "model", None) == model]
