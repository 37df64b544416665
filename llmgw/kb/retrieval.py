"""Hybrid retrieval: the passages nearest a question's vector and those holding its words, fused by rank.

Vectors find a passage that says the same in other words; words find the
part number, the error code or the name that a small embedding model
blurs. Each ranking takes CANDIDATES passages; reciprocal rank fusion
(fusion.py) orders their union, and the best are read back from the store,
which drops any deleted since the index last heard. A filter on the files'
attributes (filters.py) narrows both rankings to the files it keeps.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.kb.filters import Filter
from llmgw.kb.fusion import K, fuse
from llmgw.kb.index import KbIndex
from llmgw.kb.near import rerank
from llmgw.store import KbStore, Passage

CANDIDATES = 40  # passages each ranking offers to the fusion
# A filter keeping at most this many passages has their vectors read from the store and compared with the
# question one by one, exact whatever the filter leaves out; past it, the index is asked for more candidates
# (up to FILTERED_MOST), as many as the share of passages the filter keeps calls for (bench_kb.py measures both).
FILTERED_EXACT = 2_000
FILTERED_MOST = 4_000  # sqlite-vec answers at most 4,096 nearest at once
HYBRID, VECTOR, WORDS = "hybrid", "vector", "words"
MODES = (HYBRID, VECTOR, WORDS)


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float  # from 0 to 1: 1 for a passage first in every ranking asked


@dataclass(frozen=True)
class Only:
    """The files a filter keeps, as (knowledge base, file) pairs, and how many passages they hold."""

    files: frozenset[tuple[str, str]]
    passages: int


async def kept_by(store: KbStore, vector_store_ids: Sequence[str], test: Filter) -> Only:
    """The searchable files of the knowledge bases whose attributes pass the filter."""
    files: set[tuple[str, str]] = set()
    passages = 0
    for vs_id in vector_store_ids:
        for file_id, attributes, count in await store.kb_file_attributes([vs_id]):
            if test(attributes):
                files.add((vs_id, file_id))
                passages += count
    return Only(frozenset(files), passages)


async def search(store: KbStore, index: KbIndex, vector_store_ids: Sequence[str], question: str,
                 vector: bytes | None, limit: int, mode: str = HYBRID, only: Only | None = None) -> list[Hit]:
    """The best `limit` passages of the knowledge bases for the question (`vector`: its embedding); of the
    files `only` names, when a filter chose them."""
    if only is not None and not only.files:
        return []
    rankings: list[list[int]] = []
    if mode in (HYBRID, VECTOR) and vector is not None:
        rankings.append(await _nearest(store, index, vector_store_ids, vector, only))
    if mode in (HYBRID, WORDS):
        file_ids = None if only is None else sorted({file_id for _, file_id in only.files})
        rankings.append(await store.search_words(vector_store_ids, question, CANDIDATES, file_ids))
    if not rankings:
        return []
    best = 1.0 / (K + 1) * len(rankings)
    fused = fuse(rankings)
    # Read back more than asked for: some may have been deleted since the index heard.
    wanted = fused[:limit * 2]
    found = {p.id: p for p in await store.passages_by_id([pid for pid, _ in wanted])
             if only is None or (p.vector_store_id, p.file_id) in only.files}
    hits = [Hit(found[pid], min(1.0, score / best)) for pid, score in wanted if pid in found]
    return hits[:limit]


async def _nearest(store: KbStore, index: KbIndex, vector_store_ids: Sequence[str], vector: bytes,
                   only: Only | None) -> list[int]:
    """The CANDIDATES passages nearest the question: from each base's index, or, with a filter, among its files."""
    near: list[tuple[int, float]] = []
    if only is not None and only.passages <= FILTERED_EXACT:
        # Few enough to compare with the question one by one: exact, whatever the filter leaves out.
        rows: list[tuple[int, bytes]] = []
        for vs_id, file_id in sorted(only.files):
            rows += [(pid, vec) for pid, _, vec in await store.passage_vectors(vs_id, file_id)]
        near = await asyncio.to_thread(rerank, vector, rows, CANDIDATES)
        return [pid for pid, _ in near]
    # Unfiltered, or a filter keeping more than that: the index's nearest. With a filter, asked for as many more
    # as the share it keeps needs to leave CANDIDATES of its files, twice over, and those of its files taken.
    asked, keep = CANDIDATES, {}
    if only is not None:
        for vs_id in vector_store_ids:
            await index.load(vs_id)
            keep[vs_id] = index.ids_of(vs_id, {file_id for base, file_id in only.files if base == vs_id})
        held = sum(index.passages(vs_id) for vs_id in vector_store_ids) or only.passages
        asked = min(FILTERED_MOST, CANDIDATES * max(1, math.ceil(2 * held / max(1, only.passages))))
    for vs_id in vector_store_ids:
        near += await index.search(vs_id, vector, asked, keep.get(vs_id) if only is not None else None)
    near.sort(key=lambda pair: pair[1])
    return [pid for pid, _ in near[:CANDIDATES]]
