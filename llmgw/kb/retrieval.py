"""Hybrid retrieval: the passages nearest a question's vector and those holding its words, fused by rank.

Vectors find a passage that says the same in other words; words find the
part number, the error code or the name that a small embedding model
blurs. Each ranking takes CANDIDATES passages; reciprocal rank fusion
(fusion.py) orders their union, and the best are read back from the store,
which drops any deleted since the index last heard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.kb.fusion import K, fuse
from llmgw.kb.index import KbIndex
from llmgw.store import KbStore, Passage

CANDIDATES = 40  # passages each ranking offers to the fusion
HYBRID, VECTOR, WORDS = "hybrid", "vector", "words"
MODES = (HYBRID, VECTOR, WORDS)


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float  # from 0 to 1: 1 for a passage first in every ranking asked


async def search(store: KbStore, index: KbIndex, vector_store_ids: Sequence[str], question: str,
                 vector: bytes | None, limit: int, mode: str = HYBRID) -> list[Hit]:
    """The best `limit` passages of the knowledge bases for the question (`vector`: its embedding)."""
    rankings: list[list[int]] = []
    if mode in (HYBRID, VECTOR) and vector is not None:
        near: list[tuple[int, float]] = []
        for vs_id in vector_store_ids:
            near += await index.search(vs_id, vector, CANDIDATES)
        near.sort(key=lambda pair: pair[1])
        rankings.append([pid for pid, _ in near[:CANDIDATES]])
    if mode in (HYBRID, WORDS):
        rankings.append(await store.search_words(vector_store_ids, question, CANDIDATES))
    if not rankings:
        return []
    best = 1.0 / (K + 1) * len(rankings)
    fused = fuse(rankings)
    # Read back more than asked for: some may have been deleted since the index heard.
    wanted = fused[:limit * 2]
    found = {p.id: p for p in await store.passages_by_id([pid for pid, _ in wanted])}
    hits = [Hit(found[pid], min(1.0, score / best)) for pid, score in wanted if pid in found]
    return hits[:limit]
