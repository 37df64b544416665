"""A key the portal drops in one worker process leaves every worker's cache, and nothing echoes for ever."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from llmgw.control.workers import FannedKeys, WorkerPool
from llmgw.control.workers.messages import KeysChanged
from llmgw.control.workers.worker import Worker, WorkerKeys


class Cache:
    """What a KeyCache is told to drop."""

    def __init__(self):
        self.dropped: list[str | None] = []

    def invalidate(self, key_id: str) -> None:
        self.dropped.append(key_id)

    def clear(self) -> None:
        self.dropped.append(None)


class Channel:
    """One end of a worker's socketpair: what was sent on it, and what it will receive."""

    def __init__(self, incoming=()):
        self.sent: list = []
        self._incoming = list(incoming)

    def send(self, message) -> None:
        self.sent.append(message)

    async def receive(self):
        return self._incoming.pop(0) if self._incoming else None


def test_a_key_the_portal_revokes_in_a_worker_is_dropped_there_and_told_to_the_main_process():
    cache, channel = Cache(), Channel()
    keys = WorkerKeys(cache, channel)

    keys.invalidate("key_1")
    keys.clear()

    assert cache.dropped == ["key_1", None]
    assert channel.sent == [KeysChanged(invalidate="key_1"), KeysChanged(clear=True)]


def test_the_main_process_drops_what_a_worker_told_it_and_tells_every_worker():
    plane = SimpleNamespace(registry=CollectorRegistry())
    pool = WorkerPool(plane, [None, None, None])
    channels = [Channel() for _ in pool.slots]
    for slot, channel in zip(pool.slots, channels, strict=True):
        slot.channel = channel
    main_cache = Cache()
    plane.keys = FannedKeys(main_cache, pool)

    pool.heard_keys_changed(KeysChanged(invalidate="key_1"))
    pool.heard_keys_changed(KeysChanged(clear=True))

    assert main_cache.dropped == ["key_1", None]
    assert all(c.sent == [KeysChanged(invalidate="key_1"), KeysChanged(clear=True)] for c in channels)


async def test_a_worker_told_by_the_main_process_drops_the_key_without_telling_it_back():
    channel = Channel([KeysChanged(invalidate="key_1"), KeysChanged(clear=True)])
    worker = Worker(SimpleNamespace(machine_name="cp1"), 0, channel, [])
    cache = Cache()
    worker._keys = cache
    worker._router = SimpleNamespace(limits=SimpleNamespace(borrower=None))

    await worker._hear()

    assert cache.dropped == ["key_1", None]
    assert channel.sent == []
