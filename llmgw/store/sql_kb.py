"""Knowledge bases in the store (issue 29), in SQL both dialects run, but for word search.

A mixin of SQLStore (sql.py), one domain per module. A file's passages are
written in the same transaction that marks it completed, and only while it
is still in progress: a file removed or cancelled while it was embedded
leaves no passage behind. Every change to the passages is also a row of
kb_changes, which each control plane's vector index follows (llmgw.kb).

Words are searched by the store: SQLite's FTS5 (passage_words, porter
stemming) and PostgreSQL's full-text search (the english configuration, the
same stems), both asked for any of the question's words and ranked by their
own measure (bm25, ts_rank); only the order is used (reciprocal rank fusion).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from llmgw.store.driver import Driver, Row
from llmgw.store.records_kb import (
    KB_ADD,
    KB_DROP,
    KB_FILE_IN_PROGRESS,
    KB_OWNER_SCOPES,
    KB_REMOVE,
    KbChange,
    KbCounts,
    KbFile,
    KbGrant,
    NewPassage,
    Passage,
    VectorStore,
    shown_name,
)
from llmgw.store.sql_json import dump_json, load_json

_STORE = ("id, owner_id, key_id, name, embedding_model, chunk_tokens, chunk_overlap, created_at, last_active_at, "
          "metadata, owner_scope")
_FILE = ("vector_store_id, file_id, key_id, status, created_at, bytes, chunk_tokens, chunk_overlap, passages, "
         "last_error, attributes, skipped, batch_id")
# Passages per INSERT: a file of a few thousand passages is a few dozen statements.
_PASSAGES_PER_INSERT = 100
# The words of a question that are searched for, at most: a pasted page is not a question.
MAX_WORDS = 32
_WORD = re.compile(r"\w+")
# Snowball's English stop words, which PostgreSQL's english configuration leaves out of a query: left out on
# SQLite too, so that "the" or "which" ranks no passage on either store.
STOP_WORDS = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "did", "do", "does",
    "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her",
    "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or",
    "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than",
    "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those",
    "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "whom", "why", "will", "with", "you", "your", "yours", "yourself", "yourselves",
))


def _store(r: Row) -> VectorStore:
    return VectorStore(r[0], r[1], r[2], r[3], r[4], int(r[5]), int(r[6]), float(r[7]), float(r[8]),
                       load_json(r[9]) or {}, r[10])


def _file(r: Row) -> KbFile:
    return KbFile(r[0], r[1], r[2], r[3], float(r[4]), int(r[5]), int(r[6]), int(r[7]), int(r[8]), load_json(r[9]),
                  load_json(r[10]) or {}, load_json(r[11]) or [], r[12])


def _places(first: int, count: int) -> str:
    return ", ".join(f"${n}" for n in range(first, first + count))


def words_of(question: str) -> list[str]:
    """The distinct words of a question but its stop words, in order, lower-cased, MAX_WORDS at most."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(question.lower()):
        if word in STOP_WORDS:
            continue
        seen.setdefault(word, None)
        if len(seen) == MAX_WORDS:
            break
    return list(seen)


class KbSQL:
    _db: Driver

    # knowledge bases

    async def add_vector_store(self, vs: VectorStore) -> None:
        await self._db.execute(
            f"INSERT INTO vector_stores ({_STORE}) VALUES ({_places(1, 11)})",
            vs.id, vs.owner_id, vs.key_id, vs.name, vs.embedding_model, vs.chunk_tokens, vs.chunk_overlap,
            vs.created_at, vs.last_active_at, dump_json(vs.metadata), vs.owner_scope)

    async def vector_store(self, vector_store_id: str) -> VectorStore | None:
        row = await self._db.fetchrow(f"SELECT {_STORE} FROM vector_stores WHERE id = $1", vector_store_id)
        return None if row is None else _store(row)

    async def list_vector_stores(self, places: Sequence[tuple[str, str]], *, limit: int = 20,
                                 after: str | None = None, newest_first: bool = True) -> list[VectorStore]:
        """The knowledge bases a key sees: owned by one of `places` ((scope, id): its project, team and org) or
        given to one of them (its key too), newest first, after the base `after` (a page's last)."""
        args: list[Any] = []
        owned, granted = [], []
        for scope, ident in places:
            args += [scope, ident]
            n = len(args)
            granted.append(f"(g.scope = ${n - 1} AND g.scope_id = ${n})")
            if scope in KB_OWNER_SCOPES:
                owned.append(f"(owner_scope = ${n - 1} AND owner_id = ${n})")
        where = (f"({' OR '.join(owned) or 'FALSE'} OR EXISTS (SELECT 1 FROM kb_grants g WHERE "
                 f"g.vector_store_id = vector_stores.id AND ({' OR '.join(granted) or 'FALSE'})))")
        towards = "<" if newest_first else ">"
        if after is not None:
            args.append(after)
            where += (f" AND (created_at, id) {towards} (SELECT created_at, id FROM vector_stores "
                      f"WHERE id = ${len(args)})")
        args.append(int(limit))
        order = "DESC" if newest_first else "ASC"
        rows = await self._db.fetch(
            f"SELECT {_STORE} FROM vector_stores WHERE {where} ORDER BY created_at {order}, id {order} "
            f"LIMIT ${len(args)}", *args)
        return [_store(r) for r in rows]

    async def kb_grants(self, vector_store_id: str) -> list[KbGrant]:
        rows = await self._db.fetch("SELECT vector_store_id, scope, scope_id, access FROM kb_grants "
                                    "WHERE vector_store_id = $1 ORDER BY scope, scope_id", vector_store_id)
        return [KbGrant(r[0], r[1], r[2], r[3]) for r in rows]

    async def grant_kb(self, grant: KbGrant) -> None:
        """The grant, replacing one to the same place."""
        await self._db.execute("INSERT INTO kb_grants (vector_store_id, scope, scope_id, access) "
                               "VALUES ($1, $2, $3, $4) ON CONFLICT (vector_store_id, scope, scope_id) "
                               "DO UPDATE SET access = excluded.access",
                               grant.vector_store_id, grant.scope, grant.scope_id, grant.access)

    async def revoke_kb(self, vector_store_id: str, scope: str, scope_id: str) -> bool:
        rows = await self._db.fetch("DELETE FROM kb_grants WHERE vector_store_id = $1 AND scope = $2 AND "
                                    "scope_id = $3 RETURNING scope", vector_store_id, scope, scope_id)
        return bool(rows)

    async def all_vector_stores(self, limit: int = 1000) -> list[VectorStore]:
        """Every knowledge base of every project, newest first (the administrator's list)."""
        rows = await self._db.fetch(f"SELECT {_STORE} FROM vector_stores ORDER BY created_at DESC, id DESC LIMIT $1",
                                    int(limit))
        return [_store(r) for r in rows]

    async def update_vector_store(self, vector_store_id: str, *, name: str | None = None,
                                  metadata: dict[str, str] | None = None) -> VectorStore | None:
        sets, args = ["last_active_at = $2"], [vector_store_id, time.time()]  # type: list[str], list[Any]
        if name is not None:
            args.append(name)
            sets.append(f"name = ${len(args)}")
        if metadata is not None:
            args.append(dump_json(metadata))
            sets.append(f"metadata = ${len(args)}")
        await self._db.execute(f"UPDATE vector_stores SET {', '.join(sets)} WHERE id = $1", *args)
        return await self.vector_store(vector_store_id)

    async def delete_vector_store(self, vector_store_id: str) -> bool:
        """The knowledge base, its files' places in it and every passage of it, in one transaction."""
        async with self._db.transaction() as tx:
            gone = await tx.fetch("DELETE FROM vector_stores WHERE id = $1 RETURNING id", vector_store_id)
            if not gone:
                return False
            await tx.execute("DELETE FROM vector_store_files WHERE vector_store_id = $1", vector_store_id)
            await tx.execute("DELETE FROM kb_grants WHERE vector_store_id = $1", vector_store_id)
            await tx.execute("DELETE FROM passages WHERE vector_store_id = $1", vector_store_id)
            await tx.execute("INSERT INTO kb_changes (vector_store_id, file_id, op, at) VALUES ($1, NULL, $2, $3)",
                             vector_store_id, KB_DROP, time.time())
        return True

    async def vector_store_counts(self, vector_store_ids: Sequence[str]) -> dict[str, KbCounts]:
        """Each knowledge base's files by status, and the bytes of its completed ones."""
        if not vector_store_ids:
            return {}
        rows = await self._db.fetch(
            "SELECT vector_store_id, status, COUNT(*), SUM(CASE WHEN status = 'completed' THEN bytes ELSE 0 END) "
            f"FROM vector_store_files WHERE vector_store_id IN ({_places(1, len(vector_store_ids))}) "
            "GROUP BY vector_store_id, status", *vector_store_ids)
        found: dict[str, dict[str, int]] = {}
        for vs_id, status, count, used in rows:
            counts = found.setdefault(vs_id, {"usage_bytes": 0})
            counts[status] = int(count)
            counts["usage_bytes"] += int(used or 0)
        return {vs_id: KbCounts(**counts) for vs_id, counts in found.items()}

    # its files

    async def add_kb_file(self, file: KbFile) -> bool:
        """False when the file is in the knowledge base already (its row is left as it is)."""
        async with self._db.transaction() as tx:
            if await tx.fetchrow("SELECT 1 FROM vector_store_files WHERE vector_store_id = $1 AND file_id = $2",
                                 file.vector_store_id, file.file_id):
                return False
            await tx.execute(
                f"INSERT INTO vector_store_files ({_FILE}) VALUES ({_places(1, 13)})",
                file.vector_store_id, file.file_id, file.key_id, file.status, file.created_at, file.bytes,
                file.chunk_tokens, file.chunk_overlap, file.passages, dump_json(file.last_error),
                dump_json(file.attributes), dump_json(file.skipped), file.batch_id)
            await tx.execute("UPDATE vector_stores SET last_active_at = $2 WHERE id = $1", file.vector_store_id,
                             time.time())
        return True

    async def kb_file(self, vector_store_id: str, file_id: str) -> KbFile | None:
        row = await self._db.fetchrow(
            f"SELECT {_FILE} FROM vector_store_files WHERE vector_store_id = $1 AND file_id = $2",
            vector_store_id, file_id)
        return None if row is None else _file(row)

    async def list_kb_files(self, vector_store_id: str, *, status: str | None = None, limit: int = 20,
                            after: str | None = None, newest_first: bool = True,
                            batch_id: str | None = None) -> list[KbFile]:
        where, args = ["vector_store_id = $1"], [vector_store_id]  # type: list[str], list[Any]
        if batch_id is not None:
            args.append(batch_id)
            where.append(f"batch_id = ${len(args)}")
        if status is not None:
            args.append(status)
            where.append(f"status = ${len(args)}")
        towards, order = ("<", "DESC") if newest_first else (">", "ASC")
        if after is not None:
            args.append(after)
            where.append(f"(created_at, file_id) {towards} (SELECT created_at, file_id FROM vector_store_files "
                         f"WHERE vector_store_id = $1 AND file_id = ${len(args)})")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_FILE} FROM vector_store_files WHERE {' AND '.join(where)} "
            f"ORDER BY created_at {order}, file_id {order} LIMIT ${len(args)}", *args)
        return [_file(r) for r in rows]

    async def kb_batch_counts(self, vector_store_id: str, batch_id: str) -> tuple[KbCounts, float] | None:
        """A file batch's files by status and when it was made; None for a batch with no file here."""
        rows = await self._db.fetch(
            "SELECT status, COUNT(*), MIN(created_at) FROM vector_store_files WHERE vector_store_id = $1 AND "
            "batch_id = $2 GROUP BY status", vector_store_id, batch_id)
        if not rows:
            return None
        counts = {status: int(count) for status, count, _ in rows}
        return KbCounts(**counts), min(float(r[2]) for r in rows)

    async def cancel_kb_batch(self, vector_store_id: str, batch_id: str) -> int:
        """The batch's files still in progress, cancelled: how many."""
        rows = await self._db.fetch(
            "UPDATE vector_store_files SET status = 'cancelled', last_error = $4 WHERE vector_store_id = $1 AND "
            "batch_id = $2 AND status = $3 RETURNING file_id", vector_store_id, batch_id, KB_FILE_IN_PROGRESS,
            dump_json({"code": "cancelled", "message": "the file batch was cancelled before this file was read"}))
        return len(rows)

    async def kb_files_in_progress(self) -> list[KbFile]:
        """Every file still to be read and embedded, oldest first (a new leader carries them on)."""
        rows = await self._db.fetch(f"SELECT {_FILE} FROM vector_store_files WHERE status = $1 ORDER BY created_at",
                                    KB_FILE_IN_PROGRESS)
        return [_file(r) for r in rows]

    async def finish_kb_file(self, vector_store_id: str, file_id: str, passages: Sequence[NewPassage],
                             skipped: Sequence[dict[str, Any]] = ()) -> bool:
        """The file's passages and its status completed, in one transaction; False (and nothing written) when
        it is no longer in progress: removed from the knowledge base, or cancelled, while it was embedded.
        `skipped`: the passages left out, each saying which and why."""
        async with self._db.transaction() as tx:
            moved = await tx.fetch(
                "UPDATE vector_store_files SET status = 'completed', passages = $3, last_error = NULL, skipped = $5 "
                "WHERE vector_store_id = $1 AND file_id = $2 AND status = $4 RETURNING file_id",
                vector_store_id, file_id, len(passages), KB_FILE_IN_PROGRESS, dump_json(list(skipped)))
            if not moved:
                return False
            for start in range(0, len(passages), _PASSAGES_PER_INSERT):
                part = passages[start:start + _PASSAGES_PER_INSERT]
                values = ", ".join(f"({_places(5 * n + 1, 5)})" for n in range(len(part)))
                args: list[Any] = []
                for p in part:
                    args += [vector_store_id, file_id, p.ordinal, p.text, p.vector]
                await tx.execute(
                    f"INSERT INTO passages (vector_store_id, file_id, ordinal, text, vector) VALUES {values}", *args)
            await tx.execute("INSERT INTO kb_changes (vector_store_id, file_id, op, at) VALUES ($1, $2, $3, $4)",
                             vector_store_id, file_id, KB_ADD, time.time())
        return True

    async def fail_kb_file(self, vector_store_id: str, file_id: str, status: str, code: str, message: str) -> bool:
        """The file failed (or was cancelled), saying why; False when it was no longer in progress."""
        rows = await self._db.fetch(
            "UPDATE vector_store_files SET status = $3, last_error = $4 "
            "WHERE vector_store_id = $1 AND file_id = $2 AND status = $5 RETURNING file_id",
            vector_store_id, file_id, status, dump_json({"code": code, "message": message}), KB_FILE_IN_PROGRESS)
        return bool(rows)

    async def remove_kb_file(self, vector_store_id: str, file_id: str) -> bool:
        """The file out of the knowledge base, and its passages with it."""
        async with self._db.transaction() as tx:
            gone = await tx.fetch("DELETE FROM vector_store_files WHERE vector_store_id = $1 AND file_id = $2 "
                                  "RETURNING file_id", vector_store_id, file_id)
            if not gone:
                return False
            await _remove_passages(tx, vector_store_id, file_id)
        return True

    async def remove_file_from_kbs(self, file_id: str) -> list[str]:
        """A file deleted from /v1/files: out of every knowledge base it was in; those bases' ids."""
        async with self._db.transaction() as tx:
            rows = await tx.fetch("DELETE FROM vector_store_files WHERE file_id = $1 RETURNING vector_store_id",
                                  file_id)
            for (vs_id,) in rows:
                await _remove_passages(tx, vs_id, file_id)
        return [r[0] for r in rows]

    # passages

    async def passage_vectors(self, vector_store_id: str, file_id: str | None = None, *, after: int = 0,
                              limit: int | None = None) -> list[tuple[int, str, bytes]]:
        """(id, file id, vector) of a knowledge base's passages, or of one file's; with `limit`, a page of them in
        the order of their ids, those after `after`."""
        where, args = ["vector_store_id = $1"], [vector_store_id]  # type: list[str], list[Any]
        if file_id is not None:
            args.append(file_id)
            where.append(f"file_id = ${len(args)}")
        page = ""
        if limit is not None:
            args.append(int(after))
            where.append(f"id > ${len(args)}")
            args.append(int(limit))
            page = f" ORDER BY id LIMIT ${len(args)}"
        rows = await self._db.fetch(f"SELECT id, file_id, vector FROM passages WHERE {' AND '.join(where)}{page}",
                                    *args)
        return [(int(r[0]), r[1], bytes(r[2])) for r in rows]

    async def passage_vectors_by_id(self, ids: Sequence[int]) -> list[tuple[int, bytes]]:
        """(id, vector) of the passages still there of `ids` (in no order)."""
        if not ids:
            return []
        rows = await self._db.fetch(f"SELECT id, vector FROM passages WHERE id IN ({_places(1, len(ids))})",
                                    *[int(i) for i in ids])
        return [(int(r[0]), bytes(r[1])) for r in rows]

    async def passages_by_id(self, ids: Sequence[int]) -> list[Passage]:
        """The passages still there of `ids`, with their file's name and attributes (in no order)."""
        if not ids:
            return []
        rows = await self._db.fetch(
            "SELECT p.id, p.vector_store_id, p.file_id, COALESCE(f.filename, p.file_id), p.ordinal, p.text, "
            "vf.attributes FROM passages p "
            "JOIN vector_store_files vf ON vf.vector_store_id = p.vector_store_id AND vf.file_id = p.file_id "
            "LEFT JOIN files f ON f.id = p.file_id "
            f"WHERE p.id IN ({_places(1, len(ids))})", *[int(i) for i in ids])
        return [Passage(int(r[0]), r[1], r[2], shown_name(r[3]), int(r[4]), r[5], load_json(r[6]) or {}) for r in rows]

    async def search_words(self, vector_store_ids: Sequence[str], question: str, limit: int,
                           file_ids: Sequence[str] | None = None) -> list[int]:
        """The ids of the passages holding any of the question's words, best first; of `file_ids` only, if given."""
        words = words_of(question)
        if not words or not vector_store_ids or (file_ids is not None and not file_ids):
            return []
        args: list[Any] = [*vector_store_ids]
        stores = _places(2, len(vector_store_ids))
        files = ""
        if file_ids is not None:
            files = f" AND p.file_id IN ({_places(len(args) + 2, len(file_ids))})"
            args += file_ids
        last = f"${len(args) + 2}"
        if self._db.dialect == "sqlite":
            match = " OR ".join(f'"{w}"' for w in words)
            rows = await self._db.fetch(
                "SELECT p.id FROM passage_words JOIN passages p ON p.id = passage_words.rowid "
                f"WHERE passage_words MATCH $1 AND p.vector_store_id IN ({stores}){files} "
                f"ORDER BY bm25(passage_words), p.id LIMIT {last}", match, *args, int(limit))
        else:
            rows = await self._db.fetch(
                "SELECT p.id FROM passages p, to_tsquery('english', $1) q "
                f"WHERE p.vector_store_id IN ({stores}){files} AND to_tsvector('english', p.text) @@ q "
                f"ORDER BY ts_rank(to_tsvector('english', p.text), q) DESC, p.id LIMIT {last}",
                " | ".join(words), *args, int(limit))
        return [int(r[0]) for r in rows]

    async def kb_file_attributes(self, vector_store_ids: Sequence[str]) -> list[tuple[str, dict[str, Any], int]]:
        """(file id, attributes, passages) of each searchable file of the knowledge bases: what filters read."""
        if not vector_store_ids:
            return []
        rows = await self._db.fetch(
            "SELECT file_id, attributes, passages FROM vector_store_files "
            f"WHERE vector_store_id IN ({_places(1, len(vector_store_ids))}) AND status = 'completed'",
            *vector_store_ids)
        return [(r[0], load_json(r[1]) or {}, int(r[2] or 0)) for r in rows]

    # what changed, for each control plane's vector index

    async def kb_changes(self, after: int, limit: int = 1000) -> list[KbChange]:
        rows = await self._db.fetch("SELECT seq, vector_store_id, file_id, op FROM kb_changes WHERE seq > $1 "
                                    "ORDER BY seq LIMIT $2", int(after), int(limit))
        return [KbChange(int(r[0]), r[1], r[2], r[3]) for r in rows]

    async def prune_kb_changes(self, before: float) -> int:
        """Changes written before `before` deleted, but the last (whose number a new index starts from)."""
        rows = await self._db.fetch("DELETE FROM kb_changes WHERE at < $1 AND seq < (SELECT MAX(seq) FROM kb_changes) "
                                    "RETURNING seq", before)
        return len(rows)

    async def kb_last_change(self) -> int:
        return int(await self._db.fetchval("SELECT COALESCE(MAX(seq), 0) FROM kb_changes") or 0)


async def _remove_passages(tx: Any, vector_store_id: str, file_id: str) -> None:
    await tx.execute("DELETE FROM passages WHERE vector_store_id = $1 AND file_id = $2", vector_store_id, file_id)
    await tx.execute("INSERT INTO kb_changes (vector_store_id, file_id, op, at) VALUES ($1, $2, $3, $4)",
                     vector_store_id, file_id, KB_REMOVE, time.time())
