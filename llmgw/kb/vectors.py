"""The vectors of a control plane's smaller knowledge bases, in sqlite-vec tables in memory, searched exactly.

A knowledge base is a vec0 table of its own (its embedding model's
dimensions, cosine distance), keyed by the passages' ids in the store.
Every vector of the base is compared with the question's, which sqlite-vec
does at about 8 ms for 20,000 passages of 384 dimensions on the 2-core
machine: exact, and nothing to build. A larger base is searched through a
graph instead (near.py); index.py chooses. A single thread owns the
connection: searches and loads queue behind one another rather than
contend for it.
"""

from __future__ import annotations

import asyncio
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apsw


class VectorsUnavailable(Exception):
    """sqlite-vec cannot be loaded here, in a sentence saying what to install."""


def _connect() -> apsw.Connection:
    try:
        import sqlite_vec  # type: ignore[import-untyped]  # ships no types: one function, loadable_path()
    except ImportError:
        raise VectorsUnavailable("knowledge bases need the sqlite-vec package (pip install sqlite-vec==0.1.9), "
                                 "which `python3 build.py run` installs") from None
    db = apsw.Connection(":memory:")
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.enable_load_extension(False)
    return db


class ExactVectors:
    def __init__(self) -> None:
        self._db: apsw.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-vectors")
        self._tables: dict[str, tuple[str, int]] = {}  # knowledge base -> (table, dimensions)
        self._files: dict[str, dict[str, list[int]]] = {}  # knowledge base -> file -> passage ids
        self._made = 0

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def holds(self, vector_store_id: str) -> bool:
        return vector_store_id in self._files

    def empty(self) -> bool:
        return not self._files

    def ids_of(self, vector_store_id: str, file_ids: set[str]) -> set[int]:
        held = self._files.get(vector_store_id, {})
        return {pid for fid in file_ids for pid in held.get(fid, ())}

    def passages(self, vector_store_id: str) -> int:
        return sum(len(ids) for ids in self._files.get(vector_store_id, {}).values())

    async def put(self, vector_store_id: str, rows: list[tuple[int, str, bytes]]) -> None:
        """Passages (id, file, vector) into the base's table; a file already held is replaced whole."""
        await self._run(self._put, vector_store_id, rows)

    async def remove_file(self, vector_store_id: str, file_id: str) -> None:
        await self._run(self._remove_file, vector_store_id, file_id)

    async def drop(self, vector_store_id: str) -> None:
        await self._run(self._drop, vector_store_id)

    async def search(self, vector_store_id: str, vector: bytes, k: int) -> list[tuple[int, float]]:
        """(passage id, cosine distance) of the k nearest, nearest first; none for a base not held."""
        return list(await self._run(self._search, vector_store_id, vector, k))

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    # on the index's thread

    def _conn(self) -> apsw.Connection:
        if self._db is None:
            self._db = _connect()
        return self._db

    def _put(self, vector_store_id: str, rows: list[tuple[int, str, bytes]]) -> None:
        db = self._conn()
        files = self._files.setdefault(vector_store_id, {})
        for file_id in {file_id for _, file_id, _ in rows}:
            if file_id in files:
                self._remove_file(vector_store_id, file_id)
        if not rows:
            return
        table = self._tables.get(vector_store_id)
        dims = len(rows[0][2]) // 4
        if table is None:
            self._made += 1
            table = (f"kb{self._made}", dims)
            db.execute(f"CREATE VIRTUAL TABLE {table[0]} USING vec0(embedding float[{dims}] "
                       "distance_metric=cosine)")
            self._tables[vector_store_id] = table
        name, dims = table
        # A vector of other dimensions (the base's model changed its own) cannot be compared: left out.
        fitting = [(pid, fid, vec) for pid, fid, vec in rows if len(vec) == dims * 4]
        with db:
            db.executemany(f"INSERT INTO {name} (rowid, embedding) VALUES (?, ?)",
                           [(pid, vec) for pid, _, vec in fitting])
        for pid, file_id, _ in fitting:
            files.setdefault(file_id, []).append(pid)

    def _remove_file(self, vector_store_id: str, file_id: str) -> None:
        ids = self._files.get(vector_store_id, {}).pop(file_id, [])
        table = self._tables.get(vector_store_id)
        if table and ids:
            with self._conn():
                self._conn().executemany(f"DELETE FROM {table[0]} WHERE rowid = ?", [(i,) for i in ids])

    def _drop(self, vector_store_id: str) -> None:
        self._files.pop(vector_store_id, None)
        table = self._tables.pop(vector_store_id, None)
        if table:
            self._conn().execute(f"DROP TABLE {table[0]}")

    def _search(self, vector_store_id: str, vector: bytes, k: int) -> list[tuple[int, float]]:
        table = self._tables.get(vector_store_id)
        if table is None or len(vector) != table[1] * 4 or k <= 0:
            return []
        rows = self._conn().execute(f"SELECT rowid, distance FROM {table[0]} WHERE embedding MATCH ? AND k = ?",
                                    (vector, int(k))).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]  # type: ignore[arg-type]  # apsw types a value loosely


def pack(vector: list[float]) -> bytes:
    """A vector as the store and the index keep it: float32, little-endian."""
    return struct.pack(f"<{len(vector)}f", *vector)
