"""A month's usage report on SQLite: from the day sums (usage_daily) against from the raw rows.

Seeds 1,000,000 usage rows over 90 days: 100 people with 10 keys each, 100
projects, 5 models. The first 50,000 go through Store.add_usage in batches
of 10,000, the path the usage writer takes, which keeps usage_daily in step;
the rest are a bulk INSERT into the file followed by rebuild_usage_daily(),
as add_usage alone would take the whole minute a bench has.

Prints:
  usage_daily_add_rows_per_s: rows a second through add_usage, day sums included
  usage_daily_bulk_seed_s: the bulk insert of the rest
  usage_daily_rebuild_s: rebuild_usage_daily() over 1,000,000 rows
  usage_daily_rows: rows in usage_daily afterwards
  usage_report_person_daily_p50 / _raw_p50: one person's 30 days by model (the portal's /usage),
    from the per-person rollup
  usage_project_daily_rows: rows in the per-project rollup (0009) afterwards
  usage_report_cluster_daily_p50 / _raw_p50: the whole cluster's 30 days by model (/admin/usage),
    read from the per-project rollup as no person or key narrows it
  usage_report_cluster_by_project_p50: the whole cluster's 30 days by project (/admin/usage)
  usage_report_cluster_by_person_p50: the whole cluster's 30 days by person (/admin/usage?by=person),
    from the per-person rollup
The "daily" figures go through UsageReports.by_day, as the pages do; the
"raw" ones are the same sums as one GROUP BY over the usage rows, on a
connection of their own.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time

# The repository's root, for the test kit (tests.support): a bench runs as a script, from benchmarks/.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import apsw

from llmgw.accounting import UsageReports
from llmgw.store import Usage, open_store
from llmgw.store.sqlite import sqlite_path

DAY = 86400
ROWS = 1_000_000
THROUGH_ADD = 50_000
BATCH = 10_000
PEOPLE, KEYS_EACH, PROJECTS = 100, 10, 100
MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "gemma-2-9b", "phi-3-mini")
SPAN_DAYS = 90
END = 20_000 * DAY  # a fixed day, so every run reads the same rows

RAW_BY_MODEL = (
    "SELECT CAST(at / 86400 AS INTEGER) AS d, model, COUNT(*), "
    "SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), SUM(prompt_tokens), SUM(cached_tokens), "
    "SUM(completion_tokens), SUM(cost_micros) FROM usage WHERE at >= ? AND at < ? {person} GROUP BY d, model"
)


def seeded_rows(chance: random.Random, first: int, count: int) -> list[tuple]:
    """(id, at, key_id, project_id, person_id, model, status, prompt, cached, completion, cost, detail)."""
    out = []
    for n in range(first, first + count):
        person = chance.randrange(PEOPLE)
        key = person * KEYS_EACH + chance.randrange(KEYS_EACH)
        prompt, completion = chance.randint(50, 4000), chance.randint(10, 800)
        guarded = chance.random() < 0.03
        out.append((f"req_{n:09d}", END - chance.uniform(0, SPAN_DAYS * DAY), f"key_{key:04d}",
                    f"prj_{key % PROJECTS:03d}", f"usr_{person:03d}", chance.choice(MODELS),
                    429 if chance.random() < 0.02 else 200, prompt, prompt // 4, completion,
                    prompt * 2 + completion * 6,
                    '{"guard":[{"rule":"pii","action":"redact","direction":"request"}]}' if guarded else "{}"))
    return out


def as_usage(t: tuple) -> Usage:
    return Usage(id=t[0], at=t[1], key_id=t[2], project_id=t[3], person_id=t[4], model=t[5], status=t[6],
                 prompt_tokens=t[7], cached_tokens=t[8], completion_tokens=t[9], cost_micros=t[10],
                 detail={} if t[11] == "{}" else {"guard": [{"rule": "pii", "action": "redact",
                                                              "direction": "request"}]})


def bulk_insert(path: str, rows: list[tuple]) -> None:
    conn = apsw.Connection(path)
    try:
        # A seed, not the gateway's writes: a large page cache keeps seven
        # indexes' pages in memory, and a crash here only loses a bench.
        conn.execute("PRAGMA cache_size = -400000; PRAGMA synchronous = OFF")
        rows.sort(key=lambda r: r[1])  # in time order, as requests come
        with conn:
            conn.executemany(
                "INSERT INTO usage (id, at, key_id, project_id, person_id, model, status, prompt_tokens, "
                "cached_tokens, completion_tokens, cost_micros, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows)
    finally:
        conn.close()


def p50_ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1000:.2f} ms"


async def timed_async(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        out.append(time.perf_counter() - start)
    return out


def timed_raw(conn: apsw.Connection, sql: str, args: tuple, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        conn.execute(sql, args).fetchall()
        out.append(time.perf_counter() - start)
    return out


async def bench(url: str) -> None:
    store = await open_store(url)
    chance = random.Random(13)
    try:
        start = time.perf_counter()
        for first in range(0, THROUGH_ADD, BATCH):
            await store.add_usage([as_usage(t) for t in seeded_rows(chance, first, BATCH)])
        print(f"usage_daily_add_rows_per_s: {THROUGH_ADD / (time.perf_counter() - start):.0f} rows/s")

        rest = seeded_rows(chance, THROUGH_ADD, ROWS - THROUGH_ADD)
        start = time.perf_counter()
        await asyncio.to_thread(bulk_insert, sqlite_path(url), rest)
        print(f"usage_daily_bulk_seed_s: {time.perf_counter() - start:.1f} s")
        del rest
        start = time.perf_counter()
        await store.rebuild_usage_daily()
        print(f"usage_daily_rebuild_s: {time.perf_counter() - start:.1f} s")

        reports = UsageReports(store)
        since, until = END - 30 * DAY, END
        person = "usr_042"
        raw = apsw.Connection(sqlite_path(url))
        try:
            print(f"usage_daily_rows: {raw.execute('SELECT COUNT(*) FROM usage_daily').fetchone()[0]} rows")
            person_sql = RAW_BY_MODEL.format(person="AND person_id = ?")
            cluster_sql = RAW_BY_MODEL.format(person="")
            # Both ways must give the same sums, or the figures compare nothing.
            series = await reports.by_day(since=since, until=until, person_id=person)
            assert series.totals.cost_micros == sum(r[7] for r in raw.execute(person_sql, (since, until, person)))
            daily = await timed_async(lambda: reports.by_day(since=since, until=until, person_id=person), 30)
            print(f"usage_report_person_daily_p50: {p50_ms(daily)}")
            print(f"usage_report_person_raw_p50: {p50_ms(timed_raw(raw, person_sql, (since, until, person), 30))}")
            print(f"usage_project_daily_rows: "
                  f"{raw.execute('SELECT COUNT(*) FROM usage_project_daily').fetchone()[0]} rows")
            series = await reports.by_day(since=since, until=until)
            assert series.totals.cost_micros == sum(r[7] for r in raw.execute(cluster_sql, (since, until)))
            daily = await timed_async(lambda: reports.by_day(since=since, until=until), 30)
            print(f"usage_report_cluster_daily_p50: {p50_ms(daily)}")
            daily = await timed_async(lambda: reports.by_day(since=since, until=until, by="project"), 30)
            print(f"usage_report_cluster_by_project_p50: {p50_ms(daily)}")
            daily = await timed_async(lambda: reports.by_day(since=since, until=until, by="person"), 10)
            print(f"usage_report_cluster_by_person_p50: {p50_ms(daily)}")
            print(f"usage_report_cluster_raw_p50: {p50_ms(timed_raw(raw, cluster_sql, (since, until), 5))}")
        finally:
            raw.close()
    finally:
        await store.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(f"sqlite:{tmp}/bench.db"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
