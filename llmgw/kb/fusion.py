"""Reciprocal rank fusion: several rankings of the same passages made one.

Each ranking gives a passage 1 / (K + its rank); a passage's score is the
sum over the rankings that hold it. Only the ranks count, never the
rankers' own scores, which are not comparable (a cosine distance and bm25).
K = 60 is the value of Cormack, Clarke and Büttcher (SIGIR 2009), where
fusion beat each of its inputs; a passage first in one ranking and absent
from the other still beats one tenth in both.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = 60

T = TypeVar("T", bound=Hashable)


def fuse(rankings: Sequence[Sequence[T]], k: int = K) -> list[tuple[T, float]]:
    """(item, score) best first; ties keep the order of the first ranking that holds them."""
    scores: dict[T, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])
