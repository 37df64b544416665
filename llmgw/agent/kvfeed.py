"""The node's half of routing by cache: each replica's KV-cache events followed, and sent on to the leader.

An engine started with KV events (vLLM's and sim-engine's `--kv-events-config`) publishes them to a loopback
ZeroMQ port the agent binds (llmgw/engines/kvevents.py). For each ready replica the agent subscribes there, follows the
chains of blocks, and gathers what each replica gained and lost, in llmgw's own block hashes, for the link to send
as CachedBlocks: gathered for FLUSH_S, so an engine storing blocks at every step is a message or two a second, not
a message a step.

A sequence number that skips (the publisher's high-water mark dropped a batch) makes what the leader holds of the
replica unknowable: it is told to clear it, and the chains begin again. A new leader gets the whole of every
replica's blocks at once (`resend`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from llmgw.engines import KV_TOPIC, BadBatch, Chains, Change, decode_batch
from llmgw.protocol import CachedBlocks

if TYPE_CHECKING:
    import zmq.asyncio

log = logging.getLogger("llmgw.agent")

FLUSH_S = 0.1
# What the subscriber holds unread before ZeroMQ drops: a burst of a few thousand batches.
RECEIVE_HWM = 10_000
# Hashes a message: each up to 20 characters of JSON, so a message stays far inside the link's 4 MiB
# (MAX_MESSAGE_BYTES) when a new leader is sent a replica's million blocks at once.
MESSAGE_HASHES = 50_000


def _messages(shard_id: str, change: Change) -> list[CachedBlocks]:
    """One change as one CachedBlocks, or, past MESSAGE_HASHES hashes, as parts in order: the clearing with the
    first, the removals before the additions (as the leader applies one message)."""
    removed, added, size = change.removed, change.added, change.block_size
    if len(removed) + len(added) <= MESSAGE_HASHES:
        return [CachedBlocks(shard_id, size, added, removed, change.cleared)]
    parts = [CachedBlocks(shard_id, size, removed=removed[i:i + MESSAGE_HASHES])
             for i in range(0, len(removed), MESSAGE_HASHES)]
    parts += [CachedBlocks(shard_id, size, added=added[i:i + MESSAGE_HASHES])
              for i in range(0, len(added), MESSAGE_HASHES)]
    parts[0].cleared = change.cleared
    return parts


class KvFeed:
    def __init__(self) -> None:
        self._chains: dict[str, Chains] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pending: dict[str, Change] = {}
        self._ready = asyncio.Event()
        self._context: zmq.asyncio.Context | None = None
        # Gathered only while a leader takes them: one that does not (an older leader, or none) would have
        # them pile up here; the next one gets every replica's whole instead (`resend`).
        self._sending = False

    def following(self) -> list[str]:
        return list(self._tasks)

    def follow(self, shard_id: str, endpoint: str) -> None:
        """Subscribe to `shard_id`'s engine at `endpoint` (tcp://127.0.0.1:PORT); a second call is nothing."""
        if shard_id in self._tasks or not endpoint:
            return
        self._chains[shard_id] = Chains()
        self._tasks[shard_id] = asyncio.get_running_loop().create_task(self._follow(shard_id, endpoint),
                                                                        name=f"kv-events-{shard_id}")

    def stop(self, shard_id: str) -> None:
        """No longer followed (stopped, failed): the leader is told to drop its blocks."""
        task = self._tasks.pop(shard_id, None)
        if task is None:
            return
        task.cancel()
        self._chains.pop(shard_id, None)
        if self._sending:
            self._pending[shard_id] = Change(cleared=True)
            self._ready.set()

    def resend(self) -> None:
        """Every followed replica's blocks, whole, to a leader that has none of them; gathered from now on."""
        self._sending = True
        self._pending.clear()
        for shard_id, chains in self._chains.items():
            self._pending[shard_id] = Change(block_size=chains.block_size, added=chains.held(), cleared=True)
        if self._chains:
            self._ready.set()

    def pause(self) -> None:
        """The leader is gone: nothing is gathered until the next one asks (`resend`)."""
        self._sending = False
        self._pending.clear()

    async def take(self) -> list[CachedBlocks]:
        """The next messages to send: waits for a change, then FLUSH_S for more to gather with it."""
        await self._ready.wait()
        await asyncio.sleep(FLUSH_S)
        self._ready.clear()
        pending, self._pending = self._pending, {}
        return [message for shard_id, change in pending.items() for message in _messages(shard_id, change)]

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._context is not None:
            self._context.term()
            self._context = None

    def _zmq(self) -> zmq.asyncio.Context:
        import zmq.asyncio  # only on a node that runs an engine with events

        if self._context is None:
            self._context = zmq.asyncio.Context()
        return self._context

    async def _follow(self, shard_id: str, endpoint: str) -> None:
        import zmq

        sock = self._zmq().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt_string(zmq.SUBSCRIBE, KV_TOPIC)
        try:
            # Bound here, on loopback: vLLM's publisher connects to an address without a wildcard, so the
            # events never wait on a port any other machine could reach.
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            sock.close(linger=0)
            log.warning("%s: its KV events cannot be followed at %s (%s); it is routed without them", shard_id,
                        endpoint, e)
            return
        last: int | None = None
        said_bad = False
        try:
            while True:
                frames = await sock.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                chains = self._chains.get(shard_id)
                if chains is None:
                    return
                change = self._pending.setdefault(shard_id, Change()) if self._sending else Change()
                if last is not None and seq != last + 1:
                    log.info("%s: KV events %d to %d were lost; the leader drops what it knew of this replica",
                             shard_id, last + 1, seq - 1)
                    chains.clear(change)
                last = seq
                try:
                    _, events = decode_batch(frames[2])
                except BadBatch as e:
                    if not said_bad:
                        log.warning("%s: a KV-event batch that could not be read (%s); such batches are passed "
                                    "over", shard_id, e)
                        said_bad = True
                    continue
                chains.apply(events, change)
                if change and self._sending:
                    self._ready.set()
        finally:
            sock.close(linger=0)
