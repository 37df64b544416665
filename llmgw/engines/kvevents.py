"""vLLM's KV-cache events: the blocks an engine keeps in its prefix cache, as it stores and evicts them.

Started with `--kv-events-config` (`kv_events_flag`), vLLM publishes on a ZeroMQ PUB socket, each message three
frames: the topic, a sequence number (8 bytes, big-endian), and a MessagePack batch. The batch is an array
`[ts, events, data_parallel_rank]`; each event a map tagged by `type` (vLLM 0.11 on; before, an array whose first
item was the tag, read here too):

    BlockStored       block_hashes, parent_block_hash, token_ids (every block's, one after the other), block_size
    BlockRemoved      block_hashes
    AllBlocksCleared  -

vLLM's block hashes are its own (sha256 by default, seeded by PYTHONHASHSEED or a fixed string, of its own
encoding), so they are kept only to follow a chain and to remove a block: the agent turns each stored block into
a hash of llmgw's own over its token ids (`chain`, `Chains`), the one the router computes over a request's prompt
(llmgw/router/prefixindex.py), and only those hashes leave the node. `sim-engine` publishes the same frames
(`encode_batch`), so the routing is tested on this machine with both.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

# The topic llmgw starts vLLM with: a subscriber takes this one only.
KV_TOPIC = "kv"
# vLLM's own hash of a block: bytes (sha256) or an int (its older hashes).
BlockHash = int | bytes


@dataclass(frozen=True)
class Stored:
    """Blocks now in the cache: `hashes[i]` holds `tokens[i*block_size:(i+1)*block_size]`, after `parent`."""

    hashes: tuple[BlockHash, ...]
    parent: BlockHash | None
    tokens: tuple[int, ...]
    block_size: int


@dataclass(frozen=True)
class Removed:
    hashes: tuple[BlockHash, ...]


@dataclass(frozen=True)
class Cleared:
    """Every block gone (the engine's cache was reset)."""


Event = Stored | Removed | Cleared


class BadBatch(ValueError):
    """A payload that is not a batch of KV events as vLLM writes them."""


def kv_events_flag(port: int, host: str = "127.0.0.1") -> str:
    """The value of vLLM's `--kv-events-config`: publish to `host:port`, under llmgw's topic.

    vLLM binds an address with a wildcard and connects to any other: given loopback, it connects, and the agent
    beside it binds the port and is its one subscriber. The events name what people's prompts held (token
    ids), so they are never offered to the network.
    """
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://{host}:{port}",
                       "topic": KV_TOPIC}, separators=(",", ":"))


def decode_batch(payload: bytes) -> tuple[float, list[Event]]:
    """The batch's time and its events, those of kinds not known here left out."""
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise BadBatch(f"not MessagePack: {e}") from None
    if not isinstance(batch, list) or len(batch) < 2 or not isinstance(batch[1], list):
        raise BadBatch("not [ts, events, rank]")
    events = [e for e in (_event(raw) for raw in batch[1]) if e is not None]
    return float(batch[0]), events


def _event(raw: Any) -> Event | None:
    fields: dict[str, Any]
    if isinstance(raw, dict):
        kind, fields = raw.get("type"), raw
    elif isinstance(raw, list) and raw:  # vLLM 0.9-0.10: array_like, the tag first
        kind = raw[0]
        names = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size"),
                 "BlockRemoved": ("block_hashes",)}.get(kind, ())
        fields = dict(zip(names, raw[1:], strict=False))
    else:
        raise BadBatch(f"an event that is neither a map nor an array: {type(raw).__name__}")
    try:
        if kind == "BlockStored":
            return Stored(tuple(fields["block_hashes"]), fields.get("parent_block_hash"),
                          tuple(int(t) for t in fields["token_ids"]), int(fields["block_size"]))
        if kind == "BlockRemoved":
            return Removed(tuple(fields["block_hashes"]))
    except (KeyError, TypeError, ValueError) as e:
        raise BadBatch(f"a {kind} event without its fields: {e}") from None
    if kind == "AllBlocksCleared":
        return Cleared()
    return None


def encode_batch(ts: float, events: list[Event]) -> bytes:
    """A batch as vLLM 0.32 writes it (sim-engine's publisher)."""
    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, Stored):
            out.append({"type": "BlockStored", "block_hashes": list(e.hashes), "parent_block_hash": e.parent,
                        "token_ids": list(e.tokens), "block_size": e.block_size, "lora_id": None,
                        "medium": "GPU", "lora_name": None})
        elif isinstance(e, Removed):
            out.append({"type": "BlockRemoved", "block_hashes": list(e.hashes), "medium": "GPU"})
        else:
            out.append({"type": "AllBlocksCleared"})
    return msgpack.packb([ts, out, None], use_bin_type=True)


# The chain's start: the hash before a prompt's first block.
ROOT = 0
# A replica's blocks are forgotten past this many (an engine of 80 GB of KV cache at 16 tokens a block holds
# about a million); the oldest first, as the engine's own eviction goes.
MOST_BLOCKS = 1 << 20


def chain(tokens: Sequence[int], block_size: int, parent: int = ROOT) -> list[int]:
    """llmgw's hash of each full block of `tokens`, each over the one before it: 8 bytes of blake2b."""
    hashes: list[int] = []
    h = parent
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start:start + block_size]
        digest = hashlib.blake2b(struct.pack(f"<q{len(block)}i", h, *block), digest_size=8).digest()
        h = int.from_bytes(digest, "little", signed=True)
        hashes.append(h)
    return hashes


@dataclass
class Change:
    """What one replica's cache gained and lost, in llmgw's hashes: a CachedBlocks message's body."""

    block_size: int = 0
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    cleared: bool = False

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.cleared)

    def gain(self, ours: int) -> None:
        self.added.append(ours)

    def lose(self, ours: int) -> None:
        """A block gone: one gained in this same change is taken back rather than sent gained and lost (the
        leader applies a change's removals before its additions)."""
        if ours in self.added:
            self.added.remove(ours)
        else:
            self.removed.append(ours)


class Chains:
    """One replica's blocks, the engine's hash of each against llmgw's, to follow its events.

    A block whose parent was never seen (stored before the agent subscribed, or in a batch that was lost) is
    passed over: which prefix it ends cannot be known.
    """

    def __init__(self, most_blocks: int = MOST_BLOCKS) -> None:
        self.block_size = 0
        self._most = most_blocks
        self._ours: dict[BlockHash, int] = {}  # the engine's hash -> llmgw's, oldest first

    def __len__(self) -> int:
        return len(self._ours)

    def held(self) -> list[int]:
        """llmgw's hash of every block held, oldest first."""
        return list(self._ours.values())

    def apply(self, events: Iterable[Event], into: Change | None = None) -> Change:
        change = into if into is not None else Change()
        for event in events:
            if isinstance(event, Stored):
                self._stored(event, change)
            elif isinstance(event, Removed):
                for theirs in event.hashes:
                    ours = self._ours.pop(theirs, None)
                    if ours is not None:
                        change.lose(ours)
            else:
                self.clear(change)
        change.block_size = self.block_size
        return change

    def clear(self, change: Change) -> None:
        """Everything forgotten: the leader is told to drop all it held of this replica."""
        self._ours.clear()
        change.added.clear()
        change.removed.clear()
        change.cleared = True

    def _stored(self, event: Stored, change: Change) -> None:
        if event.block_size <= 0 or len(event.tokens) != event.block_size * len(event.hashes):
            return
        if self.block_size and event.block_size != self.block_size:
            return
        if event.parent is None:
            parent = ROOT
        elif event.parent in self._ours:
            parent = self._ours[event.parent]
        else:
            return
        self.block_size = event.block_size
        for theirs, ours in zip(event.hashes, chain(event.tokens, event.block_size, parent), strict=True):
            if theirs not in self._ours:
                self._ours[theirs] = ours
                change.gain(ours)
        while len(self._ours) > self._most:
            change.lose(self._ours.pop(next(iter(self._ours))))
