"""Accounting's part of the Store, in SQL both dialects run: limits, the answer cache's setting, usage rows.

A mixin of SQLStore (sql.py), one domain per module as sql_catalog.py is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.store.driver import Driver, MissingParent, Row, Statements
from llmgw.store.errors import StoreError
from llmgw.store.records import SCOPES, Limits, ProjectCache, Usage, UsageDay
from llmgw.store.sql_json import dump_json, load_json

_LIMITS = "scope, scope_id, rpm, tpm, budget_micros, period, models, expires_at, tools"
_USAGE = (
    "id, at, key_id, project_id, model, endpoint, status, prompt_tokens, cached_tokens, "
    "completion_tokens, cost_micros, ttft_ms, duration_ms, cache, detail, answer_id, person_id, batch_id"
)
_CACHE = "project_id, ttl, similarity, enabled, updated_at"

# Spend at each level of the tree. A team's and an org's are found through
# the projects under them rather than kept on the usage row, so moving a
# project is one update and every sum follows it.
_SPEND = {
    "key": "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage "
           "WHERE key_id = $1 AND at >= $2",
    "project": "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage "
               "WHERE project_id = $1 AND at >= $2",
    "team": "SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage u "
            "JOIN projects p ON p.id = u.project_id WHERE p.team_id = $1 AND u.at >= $2",
    "org": "SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage u "
           "JOIN projects p ON p.id = u.project_id JOIN teams t ON t.id = p.team_id "
           "WHERE t.org_id = $1 AND u.at >= $2",
}

# What usage_summary groups by: the column on the usage row.
_SUMMARY_BY = {"key": "key_id", "project": "project_id", "model": "model"}

# What usage_by_day groups by besides the day and the model: a usage_daily
# column, or none ('', which PostgreSQL will not GROUP BY). '' in usage_daily
# is "none" and reads back as None.
_DAY_BY = {"model": "''", "key": "key_id", "project": "project_id", "person": "person_id"}
_DAILY_KEY = "day, project_id, key_id, person_id, model"
# The rollups (0009): the same sums per day and model and one of project or
# person only. A report of the cluster, a team or a person reads one: a day
# there is a row per project (or person) and model, not per key and person
# and project, so a month of a busy cluster is thousands of rows, not 100k+.
# table -> (its column, that column's place in a usage_daily key).
_ROLLUPS = {"usage_project_daily": ("project_id", 1), "usage_person_daily": ("person_id", 3)}
# The day totals (0010): the same sums per day and project (or person) over
# every model, what /admin/usage by project or person shows as it is: a month
# of 100 projects is 3,000 rows read with no GROUP BY. table -> as _ROLLUPS.
_TOTALS = {"usage_project_day_totals": ("project_id", 1), "usage_person_day_totals": ("person_id", 3)}
_NO_MODEL = "''"  # the model of a day summed over every model
_DAILY_SUMS = "requests, errors, prompt_tokens, cached_tokens, completion_tokens, cost_micros"
# A UTC day from an epoch time in SQL. SQLite's floor() needs math functions
# that not every build has; CAST truncates, which is the floor after 1970.
_DAY_OF = {"sqlite": "CAST(at / 86400 AS INTEGER)", "postgres": "CAST(floor(at / 86400) AS INTEGER)"}
# Ids per IN (...) list: far below both dialects' limit on parameters.
_IN_CHUNK = 1000
DAY = 86400


def day_of(at: float) -> int:
    """The UTC day holding `at`, as usage_daily counts them: days since the epoch."""
    return int(at // DAY)


def _in(first: int, count: int) -> str:
    return ", ".join(f"${n}" for n in range(first, first + count))


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i:i + _IN_CHUNK] for i in range(0, len(items), _IN_CHUNK)]


def _daily_sums(rows: Sequence[Usage]) -> list[tuple[Any, ...]]:
    """The batch summed per usage_daily row: the values of its upsert."""
    sums: dict[tuple[int, str, str, str, str], list[int]] = {}
    for u in rows:
        key = (day_of(u.at), u.project_id or "", u.key_id or "", u.person_id or "", u.model)
        total = sums.setdefault(key, [0, 0, 0, 0, 0, 0])
        total[0] += 1
        total[1] += 1 if u.status >= 400 else 0
        total[2] += u.prompt_tokens
        total[3] += u.cached_tokens
        total[4] += u.completion_tokens
        total[5] += u.cost_micros
    # In the key's order: control planes writing at once on PostgreSQL then
    # lock the rows they share in one order and never deadlock on them.
    return [(*key, *total) for key, total in sorted(sums.items())]


def _rollup_sums(daily: list[tuple[Any, ...]], place: int) -> list[tuple[Any, ...]]:
    """usage_daily's upsert values summed again per day, model and the key's column at `place`: a rollup's."""
    sums: dict[tuple[int, str, str], list[int]] = {}
    for row in daily:
        total = sums.setdefault((row[0], row[place], row[4]), [0, 0, 0, 0, 0, 0])
        for i, value in enumerate(row[5:]):
            total[i] += value
    return [(*key, *total) for key, total in sorted(sums.items())]  # in key order, as _daily_sums


def _total_sums(daily: list[tuple[Any, ...]], place: int) -> list[tuple[Any, ...]]:
    """usage_daily's upsert values summed again per day and the key's column at `place`: a day total's."""
    sums: dict[tuple[int, str], list[int]] = {}
    for row in daily:
        total = sums.setdefault((row[0], row[place]), [0, 0, 0, 0, 0, 0])
        for i, value in enumerate(row[5:]):
            total[i] += value
    return [(*key, *total) for key, total in sorted(sums.items())]  # in key order, as _daily_sums


def _totals_for(by: str, person_id: str | None, project_ids: Sequence[str] | None,
                key_id: str | None) -> str | None:
    """The day totals that answer a usage_by_day question as they are, or None."""
    if key_id is not None:
        return None
    if by == "project" and person_id is None:
        return "usage_project_day_totals"
    if by == "person" and project_ids is None:
        return "usage_person_day_totals"
    return None


def _rollup_for(by: str, person_id: str | None, project_ids: Sequence[str] | None,
                key_id: str | None) -> str | None:
    """The rollup that answers a usage_by_day question, or None when only usage_daily can."""
    if key_id is not None:
        return None
    if person_id is None and by in ("model", "project"):
        return "usage_project_daily"
    if project_ids is None and by in ("model", "person"):
        return "usage_person_daily"
    return None


def _upsert(table: str, key: str) -> str:
    columns = len(key.split(", ")) + len(_DAILY_SUMS.split(", "))
    return (f"INSERT INTO {table} ({key}, {_DAILY_SUMS}) VALUES ({_in(1, columns)}) "
            f"ON CONFLICT ({key}) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in _DAILY_SUMS.split(", ")))


def _limits(r: Row) -> Limits:
    return Limits(r[0], r[1], r[2], r[3], r[4], r[5], load_json(r[6]), r[7], load_json(r[8]))


def _usage(r: Row) -> Usage:
    return Usage(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
                 detail=load_json(r[14]) or {}, answer_id=r[15], person_id=r[16], batch_id=r[17])


def _cache(r: Row) -> ProjectCache:
    return ProjectCache(r[0], float(r[1]), None if r[2] is None else float(r[2]), bool(r[3]), float(r[4]))


async def insert_usage(tx: Statements, rows: Sequence[Usage]) -> None:
    """Usage rows and their day sums, inside the caller's transaction: add_usage's, or a batch line's
    (sql_batch.py), whose result and usage row are recorded together."""
    # DO NOTHING on a known id: the writer retries a batch whose commit it
    # did not see, and a request must be counted once however often. The
    # day sums follow the same rule: the ids already stored are read in
    # this transaction and only the others are added. (One writer a
    # process sends a request's row; two never race on one id.)
    values = [
        (u.id, u.at, u.key_id, u.project_id, u.model, u.endpoint, u.status, u.prompt_tokens,
         u.cached_tokens, u.completion_tokens, u.cost_micros, u.ttft_ms, u.duration_ms,
         u.cache, dump_json(u.detail or {}), u.answer_id, u.person_id, u.batch_id)
        for u in rows
    ]
    known: set[str] = set()
    for chunk in _chunks([u.id for u in rows]):
        found = await tx.fetch(f"SELECT id FROM usage WHERE id IN ({_in(1, len(chunk))})", *chunk)
        known.update(r[0] for r in found)
    await tx.executemany(
        f"INSERT INTO usage ({_USAGE}) VALUES ({_in(1, len(_USAGE.split(', ')))}) ON CONFLICT (id) DO NOTHING",
        values,
    )
    fresh = []
    for u in rows:
        if u.id not in known:  # and the first of an id sent twice in one batch, as the INSERT keeps
            known.add(u.id)
            fresh.append(u)
    daily = _daily_sums(fresh)
    await tx.executemany(_upsert("usage_daily", _DAILY_KEY), daily)
    for table, (column, place) in _ROLLUPS.items():
        await tx.executemany(_upsert(table, f"day, {column}, model"), _rollup_sums(daily, place))
    for table, (column, place) in _TOTALS.items():
        await tx.executemany(_upsert(table, f"day, {column}"), _total_sums(daily, place))


class UsageSQL:
    """Store methods for limits, the answer cache's setting per project and usage; see llmgw.store.Store for each."""

    _db: Driver

    # limits at each level

    async def get_limits(self, scope: str, scope_id: str) -> Limits | None:
        row = await self._db.fetchrow(
            f"SELECT {_LIMITS} FROM limits WHERE scope = $1 AND scope_id = $2", scope, scope_id
        )
        return None if row is None else _limits(row)

    async def put_limits(self, limits: Limits) -> None:
        await self._db.execute(
            f"INSERT INTO limits ({_LIMITS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "ON CONFLICT (scope, scope_id) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm, "
            "budget_micros = excluded.budget_micros, period = excluded.period, "
            "models = excluded.models, expires_at = excluded.expires_at, tools = excluded.tools",
            limits.scope, limits.scope_id, limits.rpm, limits.tpm, limits.budget_micros,
            limits.period, dump_json(limits.models), limits.expires_at, dump_json(limits.tools),
        )

    async def list_budgets(self) -> list[Limits]:
        rows = await self._db.fetch(
            f"SELECT {_LIMITS} FROM limits WHERE budget_micros IS NOT NULL ORDER BY scope, scope_id"
        )
        return [_limits(r) for r in rows]

    # the answer cache's setting per project

    async def get_project_cache(self, project_id: str) -> ProjectCache | None:
        row = await self._db.fetchrow(f"SELECT {_CACHE} FROM project_cache WHERE project_id = $1", project_id)
        return None if row is None else _cache(row)

    async def put_project_cache(self, setting: ProjectCache) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO project_cache ({_CACHE}) VALUES ($1, $2, $3, $4, $5) "
                "ON CONFLICT (project_id) DO UPDATE SET ttl = excluded.ttl, similarity = excluded.similarity, "
                "enabled = excluded.enabled, updated_at = excluded.updated_at",
                setting.project_id, float(setting.ttl),
                None if setting.similar is None else float(setting.similar),
                bool(setting.enabled), float(setting.updated_at),
            )
        except MissingParent:
            raise StoreError(
                f"there is no project with the id {setting.project_id} to set the answer cache of"
            ) from None

    async def list_project_caches(self) -> list[ProjectCache]:
        rows = await self._db.fetch(f"SELECT {_CACHE} FROM project_cache ORDER BY project_id")
        return [_cache(r) for r in rows]

    # usage rows

    async def add_usage(self, rows: Sequence[Usage]) -> None:
        if not rows:
            return
        async with self._db.transaction() as tx:
            await insert_usage(tx, rows)

    async def usage_rows(self, since: float, until: float | None = None,
                         key_id: str | None = None, project_id: str | None = None,
                         limit: int = 1000) -> list[Usage]:
        """Rows from `since` (inclusive) to `until` (exclusive), oldest first,
        so a reader can page on by passing the last row's time."""
        where = ["at >= $1"]
        args: list[object] = [since]  # the values of $1, $2, ...: times, then ids
        for column, value in (("at <", until), ("key_id =", key_id), ("project_id =", project_id)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage WHERE {' AND '.join(where)} ORDER BY at, id LIMIT ${len(args)}",
            *args,
        )
        return [_usage(r) for r in rows]

    async def spend_since(self, scope: str, scope_id: str, since: float) -> int:
        sql = _SPEND.get(scope)
        if sql is None:
            raise StoreError(f'"{scope}" is not a level of spend; use one of {", ".join(SCOPES)}')
        return int(await self._db.fetchval(sql, scope_id, since))

    async def usage_by_id(self, request_id: str) -> Usage | None:
        row = await self._db.fetchrow(f"SELECT {_USAGE} FROM usage WHERE id = $1", request_id)
        if row is None:
            # The answer's own id. A cached answer is replayed with the id it
            # was first given, so several rows can share one: the latest is
            # the one its holder most likely asks about.
            row = await self._db.fetchrow(
                f"SELECT {_USAGE} FROM usage WHERE answer_id = $1 ORDER BY at DESC, id DESC LIMIT 1",
                request_id)
        return None if row is None else _usage(row)

    async def recent_usage(self, limit: int = 50, since: float | None = None,
                           key_id: str | None = None, model: str | None = None,
                           status: int | None = None, errors: bool = False) -> list[Usage]:
        """The latest rows, newest first, that match every filter given.

        `errors` keeps rows with status 400 and up. Served by usage_at_id
        (and usage_key_at for a key): the newest rows are read first and the
        scan stops at `limit`.
        """
        where, args = [], []
        for column, value in (("at >=", since), ("key_id =", key_id), ("model =", model),
                              ("status =", status)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        if errors:
            where.append("status >= 400")
        args.append(int(limit))
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage {clause}ORDER BY at DESC, id DESC LIMIT ${len(args)}", *args)
        return [_usage(r) for r in rows]

    async def usage_summary(self, since: float, until: float | None = None,
                            by: str = "key", *, batch_only: bool = False,
                            project_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        column = _SUMMARY_BY.get(by)
        if column is None:
            raise StoreError(f'usage cannot be summed by "{by}"; use one of {", ".join(_SUMMARY_BY)}')
        where, args = "at >= $1", [since]
        if until is not None:
            where += " AND at < $2"
            args.append(until)
        if batch_only:
            where += " AND batch_id IS NOT NULL"
        # A tenant's projects, a chunk of them a query, the chunks' sums added by group.
        chunks: list[Sequence[str] | None] = [None] if project_ids is None else list(_chunks(list(project_ids)))
        sums: dict[Any, list[int]] = {}
        for chunk in chunks:
            clause = where if chunk is None else f"{where} AND project_id IN ({_in(len(args) + 1, len(chunk))})"
            rows = await self._db.fetch(
                f"SELECT {column}, COUNT(*), "
                "CAST(COALESCE(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT), "
                "CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT), "
                "CAST(COALESCE(SUM(cached_tokens), 0) AS BIGINT), "
                "CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT), "
                "CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) "
                f"FROM usage WHERE {clause} GROUP BY {column}",
                *args, *(chunk or ()),
            )
            for r in rows:
                total = sums.setdefault(r[0], [0] * 6)
                for i in range(6):
                    total[i] += int(r[i + 1])
        out = [
            {"group": group, "requests": t[0], "errors": t[1], "prompt_tokens": t[2],
             "cached_tokens": t[3], "completion_tokens": t[4], "cost_micros": t[5]}
            for group, t in sums.items()
        ]
        # Sorted here rather than in SQL: the two dialects order NULL and
        # text differently, and the same store must read the same either way.
        out.sort(key=lambda g: (-g["cost_micros"], -g["requests"], g["group"] is None, g["group"] or ""))
        return out

    async def usage_page(self, since: float, until: float | None = None,
                         after_at: float | None = None, after_id: str | None = None,
                         limit: int = 1000, *, person_id: str | None = None,
                         project_ids: Sequence[str] | None = None) -> list[Usage]:
        """Up to `limit` rows in [since, until), oldest first, after the row
        (after_at, after_id): the last of the previous page. Keyed on the
        row's place rather than an offset, so each page costs the same
        however deep the export is, and rows landing meanwhile do not shift it.
        `person_id` and `project_ids` keep one person's rows, some projects'."""
        if project_ids is not None and not project_ids:
            return []
        where = ["at >= $1"]
        args: list[object] = [since]  # the values of $1, $2, ...: times, then ids
        if until is not None:
            args.append(until)
            where.append(f"at < ${len(args)}")
        if person_id is not None:
            args.append(person_id)
            where.append(f"person_id = ${len(args)}")
        if project_ids is not None:
            where.append(f"project_id IN ({_in(len(args) + 1, len(project_ids))})")
            args.extend(project_ids)
        if after_at is not None:
            args.extend([after_at, after_id or ""])
            n = len(args)
            where.append(f"(at > ${n - 1} OR (at = ${n - 1} AND id > ${n}))")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage WHERE {' AND '.join(where)} ORDER BY at, id LIMIT ${len(args)}",
            *args,
        )
        return [_usage(r) for r in rows]

    # usage summed a UTC day at a time

    async def usage_by_day(self, since_day: int, until_day: int | None = None, *,
                           person_id: str | None = None, project_ids: Sequence[str] | None = None,
                           key_id: str | None = None, by: str = "model") -> list[UsageDay]:
        column = _DAY_BY.get(by)
        if column is None:
            raise StoreError(f'usage is summed a day at a time by {", ".join(_DAY_BY)}, not "{by}"')
        if project_ids is not None and not project_ids:
            return []  # no project: nothing, rather than every project
        totals = _totals_for(by, person_id, project_ids, key_id)
        table = totals or _rollup_for(by, person_id, project_ids, key_id) or "usage_daily"
        where = ["day >= $1"]
        args: list[object] = [int(since_day)]
        for test, value in (("day <", until_day), ("person_id =", person_id), ("key_id =", key_id)):
            if value is not None:
                args.append(value)
                where.append(f"{test} ${len(args)}")
        if project_ids is not None:
            where.append(f"project_id IN ({_in(len(args) + 1, len(project_ids))})")
            args.extend(project_ids)
        if totals is not None:
            # Already a row per day and project (or person): read as it is.
            query = (f"SELECT day, {column}, {_NO_MODEL}, {_DAILY_SUMS} FROM {table} "
                     f"WHERE {' AND '.join(where)}")
        else:
            sums = ", ".join(f"CAST(SUM({c}) AS BIGINT)" for c in _DAILY_SUMS.split(", "))
            # By key, project or person the models are summed here, not in
            # Python: a cluster's month by project is 3,000 rows rather than
            # 15,000, which was most of /admin/usage's time (bench_usage_daily).
            query = (f"SELECT day, {column}, {'model' if by == 'model' else _NO_MODEL}, {sums} FROM {table} "
                     f"WHERE {' AND '.join(where)} GROUP BY day, {'model' if by == 'model' else column}")
        rows = await self._db.fetch(query, *args)
        if totals is not None:
            # Integer columns read as they are, already ints in both
            # dialects: int() on each of 3,000 rows' nine was a tenth of
            # /admin/usage's time.
            out = [UsageDay(r[0], r[1] or None, r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows]
        else:
            out = [UsageDay(int(r[0]), r[1] or None, r[2], int(r[3]), int(r[4]), int(r[5]), int(r[6]),
                            int(r[7]), int(r[8])) for r in rows]
        # Sorted here: the two dialects order text differently.
        out.sort(key=lambda d: (d.day, d.group is None, d.group or "", d.model))
        return out

    async def spend_by_keys(self, key_ids: Sequence[str], since_day: int) -> dict[str, int]:
        spent = dict.fromkeys(key_ids, 0)
        for chunk in _chunks(list(spent)):
            rows = await self._db.fetch(
                "SELECT key_id, CAST(SUM(cost_micros) AS BIGINT) FROM usage_daily "
                f"WHERE day >= $1 AND key_id IN ({_in(2, len(chunk))}) GROUP BY key_id",
                int(since_day), *chunk,
            )
            spent.update((r[0], int(r[1])) for r in rows)
        return spent

    async def spend_by_projects(self, project_ids: Sequence[str], since_day: int) -> int:
        total = 0
        for chunk in _chunks(list(dict.fromkeys(project_ids))):
            total += int(await self._db.fetchval(
                "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage_project_daily "
                f"WHERE day >= $1 AND project_id IN ({_in(2, len(chunk))})",
                int(since_day), *chunk,
            ))
        return total

    async def recent_decisions(self, limit: int = 50) -> list[Usage]:
        # usage_guarded_at holds the few rows with any detail, newest first;
        # the LIKE keeps those whose detail names guardrail decisions
        # (guard/decisions.py writes them under "guard", never text).
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage WHERE detail <> '{{}}' AND detail LIKE '%\"guard\":%' "
            "ORDER BY at DESC, id DESC LIMIT $1",
            int(limit),
        )
        return [_usage(r) for r in rows]

    async def rebuild_usage_daily(self) -> None:
        day = _DAY_OF[self._db.dialect]
        key = f"{day}, COALESCE(project_id, ''), COALESCE(key_id, ''), COALESCE(person_id, ''), model"
        async with self._db.transaction() as tx:
            await tx.execute("DELETE FROM usage_daily")
            await tx.execute(
                f"INSERT INTO usage_daily ({_DAILY_KEY}, {_DAILY_SUMS}) "
                f"SELECT {key}, COUNT(*), SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), "
                "SUM(prompt_tokens), SUM(cached_tokens), SUM(completion_tokens), SUM(cost_micros) "
                f"FROM usage GROUP BY {key}"
            )
            for table, (column, _) in _ROLLUPS.items():
                rollup_key = f"day, {column}, model"
                await tx.execute(f"DELETE FROM {table}")
                await tx.execute(
                    f"INSERT INTO {table} ({rollup_key}, {_DAILY_SUMS}) SELECT {rollup_key}, "
                    + ", ".join(f"SUM({c})" for c in _DAILY_SUMS.split(", "))
                    + f" FROM usage_daily GROUP BY {rollup_key}"
                )
            for table, (column, _) in _TOTALS.items():
                total_key = f"day, {column}"
                await tx.execute(f"DELETE FROM {table}")
                await tx.execute(
                    f"INSERT INTO {table} ({total_key}, {_DAILY_SUMS}) SELECT {total_key}, "
                    + ", ".join(f"SUM({c})" for c in _DAILY_SUMS.split(", "))
                    + f" FROM usage_daily GROUP BY {total_key}"
                )
