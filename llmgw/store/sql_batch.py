"""Files and batches in the store (issue 16), in SQL both dialects run.

A mixin of SQLStore (sql.py), one domain per module. A batch's lines are
rows of their own so that each runs at most once: a line's answer and its
usage row are recorded in one transaction, and only a line still pending
is recorded at all, so a line sent twice (a leader that died before it
recorded, then a new one) is counted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.store.driver import Driver, Row
from llmgw.store.errors import StoreError
from llmgw.store.records_batch import BATCH_STAMPS, ENDED_BATCH, OPEN_BATCH, Batch, BatchLine, LineResult, StoredFile
from llmgw.store.sql_json import dump_json, load_json
from llmgw.store.sql_usage import insert_usage

_FILE = "id, project_id, key_id, purpose, filename, bytes, created_at, place"
_BATCH = ("id, project_id, key_id, endpoint, input_file_id, completion_window, status, total, created_at, "
          "expires_at, completed, failed, output_file_id, error_file_id, in_progress_at, finalizing_at, "
          "completed_at, cancelling_at, cancelled_at, failed_at, expired_at, metadata, errors")
# Lines per INSERT when a batch is added: a 50,000-line batch is a few hundred statements, not 50,000.
_LINES_PER_INSERT = 200


def _file(r: Row) -> StoredFile:
    return StoredFile(r[0], r[1], r[2], r[3], r[4], int(r[5]), float(r[6]), r[7])


def _batch(r: Row) -> Batch:
    stamps = dict(zip(("in_progress_at", "finalizing_at", "completed_at", "cancelling_at", "cancelled_at",
                       "failed_at", "expired_at"), (None if v is None else float(v) for v in r[14:21]), strict=True))
    return Batch(r[0], r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]), float(r[8]), float(r[9]), int(r[10]),
                 int(r[11]), r[12], r[13], **stamps, metadata=load_json(r[21]) or {},
                 errors=load_json(r[22]) or [])


def _places(first: int, count: int) -> str:
    return ", ".join(f"${n}" for n in range(first, first + count))


class BatchSQL:
    _db: Driver

    # files

    async def add_file(self, file: StoredFile, content: bytes | None) -> None:
        await self._db.execute(
            f"INSERT INTO files ({_FILE}, content) VALUES ({_places(1, 9)})",
            file.id, file.project_id, file.key_id, file.purpose, file.filename, file.bytes, file.created_at,
            file.place, content)

    async def file_by_id(self, file_id: str) -> StoredFile | None:
        row = await self._db.fetchrow(f"SELECT {_FILE} FROM files WHERE id = $1", file_id)
        return None if row is None else _file(row)

    async def file_content(self, file_id: str) -> bytes | None:
        content = await self._db.fetchval("SELECT content FROM files WHERE id = $1", file_id)
        return None if content is None else bytes(content)

    async def list_files(self, project_id: str, *, purpose: str | None = None, limit: int = 100,
                         after: str | None = None) -> list[StoredFile]:
        where, args = ["project_id = $1"], [project_id]  # type: list[str], list[Any]
        if purpose is not None:
            args.append(purpose)
            where.append(f"purpose = ${len(args)}")
        if after is not None:
            # Newest first, paged by the last file of the page before (the SDK's `after`).
            args.append(after)
            n = len(args)
            where.append(f"(created_at, id) < (SELECT created_at, id FROM files WHERE id = ${n})")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_FILE} FROM files WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC "
            f"LIMIT ${len(args)}", *args)
        return [_file(r) for r in rows]

    async def delete_file(self, file_id: str) -> bool:
        rows = await self._db.fetch("DELETE FROM files WHERE id = $1 RETURNING id", file_id)
        return bool(rows)

    async def project_file_bytes(self, project_id: str) -> int:
        return int(await self._db.fetchval(
            "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM files WHERE project_id = $1", project_id))

    async def file_in_open_batch(self, file_id: str) -> str | None:
        """The id of a batch not yet ended that reads or wrote the file, if one does."""
        found = await self._db.fetchval(
            f"SELECT id FROM batches WHERE status IN ({_places(2, len(OPEN_BATCH))}) "
            "AND (input_file_id = $1 OR output_file_id = $1 OR error_file_id = $1) LIMIT 1",
            file_id, *OPEN_BATCH)
        return None if found is None else str(found)

    async def old_files(self, before: float, limit: int = 500, *, purposes: Sequence[str] | None = None,
                        exclude: Sequence[str] = ()) -> list[StoredFile]:
        """Files made before `before` that no batch still running reads or writes, oldest first. A file in a
        knowledge base stays while it is there: its passages are answered from, and shown by its name.
        `purposes`: only files of these; `exclude`: none of these (each kept for as long as its own owner says)."""
        args: list[Any] = [before, int(limit), *OPEN_BATCH]
        narrow = ""
        if purposes is not None:
            narrow += f" AND f.purpose IN ({_places(len(args) + 1, len(purposes))})" if purposes else " AND FALSE"
            args += list(purposes)
        if exclude:
            narrow += f" AND f.purpose NOT IN ({_places(len(args) + 1, len(exclude))})"
            args += list(exclude)
        rows = await self._db.fetch(
            f"SELECT {_FILE} FROM files f WHERE created_at < $1 AND NOT EXISTS (SELECT 1 FROM batches b "
            f"WHERE b.status IN ({_places(3, len(OPEN_BATCH))}) AND f.id IN (b.input_file_id, b.output_file_id, "
            "b.error_file_id)) AND NOT EXISTS (SELECT 1 FROM vector_store_files v WHERE v.file_id = f.id)"
            f"{narrow} ORDER BY created_at, id LIMIT $2", *args)
        return [_file(r) for r in rows]

    # batches

    async def delete_ended_batches(self, before: float) -> int:
        """Batches made before `before` that have ended, with their lines; how many."""
        rows = await self._db.fetch(
            f"DELETE FROM batches WHERE created_at < $1 AND status IN ({_places(2, len(ENDED_BATCH))}) RETURNING id",
            before, *ENDED_BATCH)
        return len(rows)

    async def add_batch(self, batch: Batch, custom_ids: Sequence[str]) -> None:
        """The batch and one pending line per custom id (line numbers from 1), in one transaction."""
        if len(custom_ids) != batch.total:
            raise StoreError(f"batch {batch.id} has {batch.total} lines but {len(custom_ids)} custom ids were given")
        lines = [(batch.id, n, custom_id) for n, custom_id in enumerate(custom_ids, start=1)]
        async with self._db.transaction() as tx:
            await tx.execute(
                f"INSERT INTO batches ({_BATCH}) VALUES ({_places(1, 23)})",
                batch.id, batch.project_id, batch.key_id, batch.endpoint, batch.input_file_id,
                batch.completion_window, batch.status, batch.total, batch.created_at, batch.expires_at,
                batch.completed, batch.failed, batch.output_file_id, batch.error_file_id, batch.in_progress_at,
                batch.finalizing_at, batch.completed_at, batch.cancelling_at, batch.cancelled_at, batch.failed_at,
                batch.expired_at, dump_json(batch.metadata), dump_json(batch.errors))
            for start in range(0, len(lines), _LINES_PER_INSERT):
                chunk = lines[start:start + _LINES_PER_INSERT]
                values = ", ".join(f"(${3 * i + 1}, ${3 * i + 2}, ${3 * i + 3})" for i in range(len(chunk)))
                await tx.execute(f"INSERT INTO batch_lines (batch_id, line, custom_id) VALUES {values}",
                                 *(v for line in chunk for v in line))

    async def batch_by_id(self, batch_id: str) -> Batch | None:
        row = await self._db.fetchrow(f"SELECT {_BATCH} FROM batches WHERE id = $1", batch_id)
        return None if row is None else _batch(row)

    async def list_batches(self, project_id: str, *, limit: int = 20, after: str | None = None) -> list[Batch]:
        args: list[Any] = [project_id]
        where = "project_id = $1"
        if after is not None:
            args.append(after)
            where += " AND (created_at, id) < (SELECT created_at, id FROM batches WHERE id = $2)"
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_BATCH} FROM batches WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ${len(args)}",
            *args)
        return [_batch(r) for r in rows]

    async def open_batches(self) -> list[Batch]:
        """Every batch the runner has still to carry on, oldest first."""
        rows = await self._db.fetch(
            f"SELECT {_BATCH} FROM batches WHERE status IN ({_places(1, len(OPEN_BATCH))}) "
            "ORDER BY created_at, id", *OPEN_BATCH)
        return [_batch(r) for r in rows]

    async def move_batch(self, batch_id: str, from_statuses: Sequence[str], status: str,
                         changes: dict[str, Any] | None = None) -> bool:
        """Set the batch's status (and stamps, file ids, errors) if its status is one of `from_statuses`:
        False when it was not, so a cancel and the runner's finish cannot both win."""
        changes = changes or {}
        unknown = set(changes) - set(BATCH_STAMPS)
        if unknown:
            raise StoreError(f"a batch has no column {', '.join(sorted(unknown))} a status change may set")
        sets: list[str] = ["status = $1"]
        args: list[Any] = [status]
        for column, value in changes.items():
            args.append(dump_json(value) if column == "errors" else value)
            sets.append(f"{column} = ${len(args)}")
        args.append(batch_id)
        n = len(args)
        rows = await self._db.fetch(
            f"UPDATE batches SET {', '.join(sets)} WHERE id = ${n} "
            f"AND status IN ({_places(n + 1, len(from_statuses))}) RETURNING id", *args, *from_statuses)
        return bool(rows)

    async def pending_lines(self, batch_id: str) -> list[int]:
        rows = await self._db.fetch(
            "SELECT line FROM batch_lines WHERE batch_id = $1 AND state = 'pending' ORDER BY line", batch_id)
        return [int(r[0]) for r in rows]

    async def finish_lines(self, batch_id: str, results: Sequence[LineResult]) -> tuple[int, int]:
        """Record lines' outcomes and their usage rows in one transaction, and count them on the batch.

        Only a line still pending is recorded, and only a recorded line's
        usage row is written: a line recorded before (by a leader that sent
        it too) keeps its first outcome and adds no row. Returns how many
        lines were recorded done and how many as errors.
        """
        done = failed = 0
        async with self._db.transaction() as tx:
            recorded = []
            for r in results:
                changed = await tx.fetch(
                    "UPDATE batch_lines SET state = $1, result = $2 WHERE batch_id = $3 AND line = $4 "
                    "AND state = 'pending' RETURNING line", r.state, dump_json(r.result), batch_id, r.line)
                if changed:
                    recorded.append(r)
                    done += r.state == "done"
                    failed += r.state != "done"
            usage = [r.usage for r in recorded if r.usage is not None]
            if usage:
                await insert_usage(tx, usage)
            if done or failed:
                await tx.execute("UPDATE batches SET completed = completed + $1, failed = failed + $2 WHERE id = $3",
                                 done, failed, batch_id)
        return done, failed

    async def batch_lines(self, batch_id: str, state: str | None = None) -> list[BatchLine]:
        """The batch's lines in order, of one state when given, with their recorded results."""
        args: list[Any] = [batch_id]
        where = "batch_id = $1"
        if state is not None:
            args.append(state)
            where += " AND state = $2"
        rows = await self._db.fetch(
            f"SELECT line, custom_id, state, result FROM batch_lines WHERE {where} ORDER BY line", *args)
        return [BatchLine(int(r[0]), r[1], r[2], load_json(r[3])) for r in rows]
