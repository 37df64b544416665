"""A control plane's view of the knowledge bases: vectors held in memory, kept current from the store.

A knowledge base's vectors are loaded from the store the first time it is
searched here, then kept current by following kb_changes every
FOLLOW_EVERY seconds (and at once after this process writes a change), so
a file added or removed on another control plane is searched, or not, here
within that time.

A base of fewer than EXACT_BELOW passages is searched exactly (vectors.py);
a larger one through an HNSW graph whose candidates are re-ranked by their
exact vectors from the store (near.py). A graph is built in a thread of its
own, from a minute to a few for a million passages: until it is ready the
base is searched by its words alone, and the changes that come meanwhile
are applied once it is. A base that grows to twice EXACT_BELOW here is
moved to a graph the same way, searched exactly until the graph is ready.

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
import time

from llmgw.kb.near import NearVectors, rerank
from llmgw.kb.vectors import ExactVectors
from llmgw.store import KB_ADD, KB_DROP, KB_REMOVE, KbChange, KbStore, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.kb")

FOLLOW_EVERY = 1.0
LOOKBACK = 64
EXACT_BELOW = 40_000  # passages: sqlite-vec compares a question with 40,000 of 384 dimensions in about 16 ms
RERANK = 4  # candidates from the graph for each passage asked for, re-ranked by their exact vectors
LOAD_PAGE = 50_000  # passages read from the store at once while a base's graph is built


class KbIndex:
    def __init__(self, store: KbStore, follow_every: float = FOLLOW_EVERY, exact_below: int = EXACT_BELOW) -> None:
        self.store = store
        self.exact = ExactVectors()
        self.near: dict[str, NearVectors] = {}
        self.follow_every = follow_every
        self.exact_below = exact_below
        self._building: dict[str, list[KbChange]] = {}  # base -> the changes that came while its graph is built
        self._builds: set[asyncio.Task[None]] = set()
        self._high: int | None = None  # the highest change seen
        self._applied: set[int] = set()
        self._loading: dict[str, asyncio.Lock] = {}
        self._catching_up = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="kb-index-follow")

    async def stop(self) -> None:
        for task in [*self._builds, *([self._task] if self._task else [])]:
            await cancel_and_wait(task)
        self.exact.close()

    def holds(self, vector_store_id: str) -> bool:
        return (self.exact.holds(vector_store_id) or vector_store_id in self.near
                or vector_store_id in self._building)

    def passages(self, vector_store_id: str) -> int:
        near = self.near.get(vector_store_id)
        return near.passages if near is not None else self.exact.passages(vector_store_id)

    def ids_of(self, vector_store_id: str, file_ids: set[str]) -> set[int]:
        """The passages held here of those files of the base (read from memory, not the store)."""
        near = self.near.get(vector_store_id)
        return near.ids_of(file_ids) if near is not None else self.exact.ids_of(vector_store_id, file_ids)

    def building(self, vector_store_id: str) -> bool:
        return vector_store_id in self._building

    async def search(self, vector_store_id: str, vector: bytes, k: int,
                     keep: set[int] | None = None) -> list[tuple[int, float]]:
        """(passage id, cosine distance) of the k nearest, nearest first; none while the base's graph is built.

        With `keep` (a filter's passages), only those: the graph's candidates are narrowed to them before their
        exact vectors are read, so a filter costs the reading of the passages it keeps, not of all asked for.
        """
        await self._ensure(vector_store_id)
        near = self.near.get(vector_store_id)
        if near is None:
            found = await self.exact.search(vector_store_id, vector, k)
            return found if keep is None else [pair for pair in found if pair[0] in keep]
        ids = await asyncio.to_thread(near.search, vector, k * RERANK)
        if keep is not None:
            ids = [pid for pid in ids if pid in keep]
        exact = await self.store.passage_vectors_by_id(ids)
        return await asyncio.to_thread(rerank, vector, exact, k)

    async def load(self, vector_store_id: str) -> None:
        """The base's vectors held here (loaded from the store at its first search)."""
        await self._ensure(vector_store_id)

    async def _ensure(self, vector_store_id: str) -> None:
        if self.holds(vector_store_id):
            return
        lock = self._loading.setdefault(vector_store_id, asyncio.Lock())
        async with lock:
            if self.holds(vector_store_id):
                return
            if self._high is None:
                await self.catch_up()
            # Changes from here on are applied again over what is loaded, which is harmless: a file's
            # passages are replaced whole, a removal of one not held does nothing.
            rows = await self.store.passage_vectors(vector_store_id, limit=self.exact_below)
            if len(rows) < self.exact_below:
                await self.exact.put(vector_store_id, rows)
            else:
                self._build(vector_store_id, rows)  # the rest read a page at a time

    def _build(self, vector_store_id: str, rows: list[tuple[int, str, bytes]]) -> None:
        self._building[vector_store_id] = []
        task = asyncio.create_task(self._built(vector_store_id, rows), name=f"kb-graph-{vector_store_id}")
        self._builds.add(task)
        task.add_done_callback(self._builds.discard)

    async def _built(self, vector_store_id: str, rows: list[tuple[int, str, bytes]]) -> None:
        """The base's graph: `rows` (its first passages, or none), then the rest from the store a page at a time.

        Read whole, a million passages were 1.5 GB of vectors and as much again of Python objects at once
        (3.9 GB of peak growth, bench kb); a page at a time, a page's worth.
        """
        started = time.monotonic()
        try:
            near: NearVectors | None = None
            after = 0
            while True:
                if not rows:
                    rows = await self.store.passage_vectors(vector_store_id, after=after, limit=LOAD_PAGE)
                    if not rows:
                        break
                near = near or NearVectors(len(rows[0][2]) // 4)
                await asyncio.to_thread(near.put, rows, False)
                after = max(pid for pid, _, _ in rows)
                rows = []
            if near is None:  # emptied while it was being built
                self._building.pop(vector_store_id, None)
                return
            self.near[vector_store_id] = near
            queued = self._building.pop(vector_store_id, [])
            if self.exact.holds(vector_store_id):
                await self.exact.drop(vector_store_id)
            for change in queued:
                await self._apply(change)
            log.info("knowledge base %s: a graph over its %d passages built in %.1f s (%.0f MB)", vector_store_id,
                     near.passages, time.monotonic() - started, near.memory_bytes / 1e6)
        except StoreError as e:
            self._building.pop(vector_store_id, None)
            self.near.pop(vector_store_id, None)
            log.warning("knowledge base %s: its graph was not finished, the store did not answer (%s); it is built "
                        "again at its next search", vector_store_id, e)

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
        if vs_id in self._building:
            self._building[vs_id].append(change)
        if change.op == KB_DROP:
            await self.exact.drop(vs_id)
            self.near.pop(vs_id, None)
            return
        if change.file_id is None or not (self.exact.holds(vs_id) or vs_id in self.near):
            return  # loaded whole when first searched
        near = self.near.get(vs_id)
        if change.op == KB_ADD:
            rows = await self.store.passage_vectors(vs_id, change.file_id)
            if near is not None:
                await asyncio.to_thread(near.put, rows)
            else:
                await self.exact.put(vs_id, rows)
                if self.exact.passages(vs_id) >= 2 * self.exact_below and vs_id not in self._building:
                    self._build(vs_id, [])
        elif change.op == KB_REMOVE:
            if near is not None:
                await asyncio.to_thread(near.remove_file, change.file_id)
            else:
                await self.exact.remove_file(vs_id, change.file_id)

    def _idle(self) -> bool:
        """Nothing held, loaded or built here: no change matters until a base is searched, which reads from then."""
        return (self.exact.empty() and not self.near and not self._building
                and not any(lock.locked() for lock in self._loading.values()))

    async def follow_once(self) -> None:
        """Apply the store's new changes; none asked for while nothing is held.

        A router that answers no question from a knowledge base (most of them, most of the time) asked the
        store for changes every second all the same. Idle, it forgets where it was: the first base loaded
        reads the last change again before its passages (_ensure), so nothing between is missed.
        """
        if self._idle():
            self._high = None
            return
        await self.catch_up()

    async def _follow(self) -> None:
        failing = False
        while True:
            try:
                await self.follow_once()
                failing = False
            except StoreError as e:
                if not failing:
                    log.warning("knowledge bases: the store did not answer (%s); their changes are read again "
                                "when it does", e)
                failing = True
            await asyncio.sleep(self.follow_every)
