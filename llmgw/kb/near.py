"""The vectors of a control plane's larger knowledge bases, in an HNSW graph (usearch), searched approximately.

Past index.py's EXACT_BELOW passages, comparing a question with every vector
costs more than a person should wait (sqlite-vec: about 0.4 ms a thousand
passages of 384 dimensions). A base that large is held as usearch's HNSW
graph over its vectors quantised to int8 (a quarter of float32's memory),
which finds the nearest few dozen in a millisecond or two at a million
passages; index.py then re-ranks those candidates by their exact float32
vectors from the store (measured by `python3 build.py bench kb`).

numpy and usearch are imported here only, when a base this large is first
searched: a control plane without one never loads them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

CONNECTIVITY = 16  # edges a node: usearch's default, the memory-recall balance HNSW's authors suggest
EXPANSION_ADD = 128
PART = 50_000  # vectors added to the graph at once
# The candidates the search keeps while it walks the graph. Measured at a million clustered passages (384
# dimensions, i8, 40 candidates re-ranked): recall@10 0.62 at 64, 0.76 at 128, 0.88 at 256, 0.96 at 512, for
# 0.4-0.9 ms; twice 512 for a margin, at about a millisecond more.
EXPANSION_SEARCH = 1024


class NearVectors:
    """One knowledge base's graph, its passages by file, safe to search while changes are applied."""

    def __init__(self, dimensions: int) -> None:
        from usearch.index import Index

        self.dimensions = dimensions
        self._graph = Index(ndim=dimensions, metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                            expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
        self._files: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    @property
    def passages(self) -> int:
        return sum(len(ids) for ids in self._files.values())

    def put(self, rows: list[tuple[int, str, bytes]], replace: bool = True) -> None:
        """Passages (id, file, vector) in; a file already held is replaced whole, unless `replace` is False (a
        base loaded a page at a time, where one file's passages may come in two pages) (blocking)."""
        import numpy as np

        fitting = [(pid, fid, vec) for pid, fid, vec in rows if len(vec) == self.dimensions * 4]
        with self._lock:
            for file_id in {fid for _, fid, _ in fitting} if replace else ():
                self._remove_file(file_id)
            if not fitting:
                return
            # A part at a time: a million vectors joined at once would be another 1.5 GB for a moment.
            for start in range(0, len(fitting), PART):
                part = fitting[start:start + PART]
                keys = np.fromiter((pid for pid, _, _ in part), dtype=np.uint64, count=len(part))
                vectors = np.frombuffer(b"".join(vec for _, _, vec in part), dtype="<f4").reshape(len(part), -1)
                self._graph.add(keys, vectors, threads=os.cpu_count() or 1)
            for pid, fid, _ in fitting:
                self._files.setdefault(fid, []).append(pid)

    def ids_of(self, file_ids: set[str]) -> set[int]:
        with self._lock:
            return {pid for fid in file_ids for pid in self._files.get(fid, ())}

    def remove_file(self, file_id: str) -> None:
        with self._lock:
            self._remove_file(file_id)

    def _remove_file(self, file_id: str) -> None:
        ids = self._files.pop(file_id, [])
        if ids:
            import numpy as np

            self._graph.remove(np.asarray(ids, dtype=np.uint64))

    def search(self, vector: bytes, k: int) -> list[int]:
        """The ids of about the k nearest passages, nearest first (blocking)."""
        import numpy as np

        if len(vector) != self.dimensions * 4 or k <= 0:
            return []
        query = np.frombuffer(vector, dtype="<f4")
        with self._lock:
            found: Any = self._graph.search(query, k)
        return [int(key) for key in found.keys]

    @property
    def memory_bytes(self) -> int:
        return int(self._graph.memory_usage)


def rerank(question: bytes, candidates: list[tuple[int, bytes]], k: int) -> list[tuple[int, float]]:
    """(id, cosine distance) of the k candidates nearest the question by their exact vectors, nearest first."""
    import numpy as np

    query = np.frombuffer(question, dtype="<f4")
    fitting = [(pid, vec) for pid, vec in candidates if len(vec) == len(question)]
    if not fitting:
        return []
    matrix = np.frombuffer(b"".join(vec for _, vec in fitting), dtype="<f4").reshape(len(fitting), -1)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
    distances = 1.0 - (matrix @ query) / np.where(norms == 0, 1.0, norms)
    order = np.argsort(distances, kind="stable")[:k]
    return [(fitting[i][0], float(distances[i])) for i in order]
