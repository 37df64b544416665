"""Workflow jobs in the store, in SQL both dialects run.

A mixin of SQLStore (sql.py), one domain per module. A job moves between
statuses only by compare-and-set (move_job), as a batch does: the client's
cancel and the runner's finish race, and exactly one of them lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.store.driver import Driver, Row
from llmgw.store.errors import StoreError
from llmgw.store.records_jobs import ENDED_JOB, JOB_CHANGES, OPEN_JOB, Job
from llmgw.store.sql_json import dump_json, load_json

_JOB = ("id, project_id, key_id, person_id, model, status, inputs, created_at, request_id, started_at, ended_at, "
        "progress, outputs, error, replica, metadata")
_JSON_CHANGES = ("progress", "outputs", "error")


def _stamp(value: Any) -> float | None:
    return None if value is None else float(value)


def _job(r: Row) -> Job:
    return Job(r[0], r[1], r[2], r[3], r[4], r[5], load_json(r[6]) or {}, float(r[7]), request_id=r[8],
               started_at=_stamp(r[9]), ended_at=_stamp(r[10]), progress=load_json(r[11]) or {},
               outputs=load_json(r[12]) or [], error=load_json(r[13]), replica=r[14],
               metadata=load_json(r[15]) or {})


def _places(first: int, count: int) -> str:
    return ", ".join(f"${n}" for n in range(first, first + count))


class JobSQL:
    _db: Driver

    async def add_job(self, job: Job) -> None:
        await self._db.execute(
            f"INSERT INTO jobs ({_JOB}) VALUES ({_places(1, 16)})",
            job.id, job.project_id, job.key_id, job.person_id, job.model, job.status, dump_json(job.inputs),
            job.created_at, job.request_id, job.started_at, job.ended_at, dump_json(job.progress),
            dump_json(job.outputs), dump_json(job.error), job.replica, dump_json(job.metadata))

    async def job_by_id(self, job_id: str) -> Job | None:
        row = await self._db.fetchrow(f"SELECT {_JOB} FROM jobs WHERE id = $1", job_id)
        return None if row is None else _job(row)

    async def list_jobs(self, project_id: str, *, limit: int = 20, after: str | None = None,
                        model: str | None = None) -> list[Job]:
        where, args = ["project_id = $1"], [project_id]  # type: list[str], list[Any]
        if model is not None:
            args.append(model)
            where.append(f"model = ${len(args)}")
        if after is not None:
            # Newest first, paged by the last job of the page before (the SDK's `after`).
            args.append(after)
            where.append(f"(created_at, id) < (SELECT created_at, id FROM jobs WHERE id = ${len(args)})")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_JOB} FROM jobs WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC "
            f"LIMIT ${len(args)}", *args)
        return [_job(r) for r in rows]

    async def open_jobs(self) -> list[Job]:
        """Every job the runner has still to start or see finish, oldest first."""
        rows = await self._db.fetch(
            f"SELECT {_JOB} FROM jobs WHERE status IN ({_places(1, len(OPEN_JOB))}) ORDER BY created_at, id",
            *OPEN_JOB)
        return [_job(r) for r in rows]

    async def move_job(self, job_id: str, from_statuses: Sequence[str], status: str,
                       changes: dict[str, Any] | None = None) -> bool:
        """Set the job's status (and JOB_CHANGES columns) if its status is one of `from_statuses`:
        False when it was not, so a cancel and the runner's finish cannot both win."""
        changes = changes or {}
        unknown = set(changes) - set(JOB_CHANGES)
        if unknown:
            raise StoreError(f"a job has no column {', '.join(sorted(unknown))} a status change may set")
        if not from_statuses:
            return False  # `IN ()` is no SQL PostgreSQL takes; from nowhere, nothing moves
        sets: list[str] = ["status = $1"]
        args: list[Any] = [status]
        for column, value in changes.items():
            args.append(dump_json(value) if column in _JSON_CHANGES else value)
            sets.append(f"{column} = ${len(args)}")
        args.append(job_id)
        n = len(args)
        rows = await self._db.fetch(
            f"UPDATE jobs SET {', '.join(sets)} WHERE id = ${n} "
            f"AND status IN ({_places(n + 1, len(from_statuses))}) RETURNING id", *args, *from_statuses)
        return bool(rows)

    async def set_job_progress(self, job_id: str, progress: dict[str, Any]) -> None:
        """Only while it runs: a progress event that arrives after the job ended (or was cancelled) is late."""
        await self._db.execute("UPDATE jobs SET progress = $1 WHERE id = $2 AND status = 'running'",
                               dump_json(progress), job_id)

    async def old_jobs(self, before: float, limit: int = 500) -> list[Job]:
        """Ended jobs made before `before`, oldest first: what retention deletes, with their output files."""
        rows = await self._db.fetch(
            f"SELECT {_JOB} FROM jobs WHERE created_at < $1 AND status IN ({_places(3, len(ENDED_JOB))}) "
            "ORDER BY created_at, id LIMIT $2", before, int(limit), *ENDED_JOB)
        return [_job(r) for r in rows]

    async def delete_job(self, job_id: str) -> bool:
        rows = await self._db.fetch("DELETE FROM jobs WHERE id = $1 RETURNING id", job_id)
        return bool(rows)
