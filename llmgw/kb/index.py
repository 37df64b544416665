"""A control plane's view of the knowledge bases: vectors held in memory, kept current from the store.

A knowledge base's vectors are loaded from the store the first time it is
searched here, then kept current by following kb_changes every
FOLLOW_EVERY seconds (and at once after this process writes a change), so
a file added or removed on another control plane is searched, or not, here
within that time.

Whatever the index holds, a passage is shown only when the store still has
it (retrieval.py reads the passages' text back by id): what was deleted is
never answered from, even in the moment before the index hears of it.

PostgreSQL hands out a sequence's numbers at insert and makes them visible
at commit, so a change may appear after one numbered above it; each look
reads back the last LOOKBACK changes again, and applies those not seen yet.
"""

from __future__ import annotations

import asyncio
import logging

from llmgw.kb.vectors import VectorIndex
from llmgw.store import KB_ADD, KB_DROP, KB_REMOVE, KbChange, KbStore, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.kb")

FOLLOW_EVERY = 1.0
LOOKBACK = 64


class KbIndex:
    def __init__(self, store: KbStore, follow_every: float = FOLLOW_EVERY) -> None:
        self.store = store
        self.vectors = VectorIndex()
        self.follow_every = follow_every
        self._high: int | None = None  # the highest change seen
        self._applied: set[int] = set()
        self._loading: dict[str, asyncio.Lock] = {}
        self._catching_up = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="kb-index-follow")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        self.vectors.close()

    async def search(self, vector_store_id: str, vector: bytes, k: int) -> list[tuple[int, float]]:
        await self._ensure(vector_store_id)
        return await self.vectors.search(vector_store_id, vector, k)

    async def _ensure(self, vector_store_id: str) -> None:
        if self.vectors.holds(vector_store_id):
            return
        lock = self._loading.setdefault(vector_store_id, asyncio.Lock())
        async with lock:
            if self.vectors.holds(vector_store_id):
                return
            if self._high is None:
                await self.catch_up()
            # Changes from here on are applied again over what is loaded, which is harmless: a file's
            # passages are replaced whole, a removal of one not held does nothing.
            rows = await self.store.passage_vectors(vector_store_id)
            await self.vectors.put(vector_store_id, rows)

    async def catch_up(self) -> None:
        """Apply the changes written since the last look."""
        async with self._catching_up:
            if self._high is None:
                self._high = await self.store.kb_last_change()
                return
            changes = await self.store.kb_changes(max(0, self._high - LOOKBACK))
            for change in changes:
                if change.seq in self._applied:
                    continue
                await self._apply(change)
                self._applied.add(change.seq)
                self._high = max(self._high, change.seq)
            low = self._high - LOOKBACK
            self._applied = {seq for seq in self._applied if seq > low}

    async def _apply(self, change: KbChange) -> None:
        vs_id = change.vector_store_id
        if change.op == KB_DROP:
            await self.vectors.drop(vs_id)
        elif not self.vectors.holds(vs_id) or change.file_id is None:
            return  # loaded whole when first searched
        elif change.op == KB_ADD:
            await self.vectors.put(vs_id, await self.store.passage_vectors(vs_id, change.file_id))
        elif change.op == KB_REMOVE:
            await self.vectors.remove_file(vs_id, change.file_id)

    async def _follow(self) -> None:
        failing = False
        while True:
            try:
                await self.catch_up()
                failing = False
            except StoreError as e:
                if not failing:
                    log.warning("knowledge bases: the store did not answer (%s); their changes are read again "
                                "when it does", e)
                failing = True
            await asyncio.sleep(self.follow_every)
