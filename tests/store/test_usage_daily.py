"""Usage summed a UTC day at a time (usage_daily): kept in step with the raw rows by add_usage."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest

from llmgw.store import ApiKey, StoreError, Usage, UsageDay, migrate, open_store

from .rawsql import raw_fetch

DAY = 86400.0
SUMS = ("requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


def row(n: int, at: float, **kw) -> Usage:
    base = dict(id=f"req_{n:05d}", at=at, key_id="key_a", project_id="prj_a", person_id="usr_a",
                model="llama", prompt_tokens=10, completion_tokens=5, cost_micros=100)
    base.update(kw)
    return Usage(**base)


def grouped(rows: list[Usage]) -> dict[tuple, list[int]]:
    """What usage_daily should hold: the raw rows grouped as its primary key is, in Python."""
    out: dict[tuple, list[int]] = {}
    for u in rows:
        key = (int(u.at // DAY), u.project_id or "", u.key_id or "", u.person_id or "", u.model)
        s = out.setdefault(key, [0] * 6)
        for i, value in enumerate((1, int(u.status >= 400), u.prompt_tokens, u.cached_tokens,
                                   u.completion_tokens, u.cost_micros)):
            s[i] += value
    return out


async def daily_table(store_url: str) -> dict[tuple, list[int]]:
    rows = await raw_fetch(store_url, f"SELECT day, project_id, key_id, person_id, model, {', '.join(SUMS)} "
                                      "FROM usage_daily")
    return {tuple(r[:5]): [int(v) for v in r[5:]] for r in rows}


async def test_the_day_sums_equal_the_raw_rows_grouped_after_many_random_batches(store, store_url):
    chance = random.Random(13)  # seeded: the same batches every run
    sent: list[Usage] = []
    for batch in range(8):
        rows = []
        for i in range(chance.randint(1, 60)):
            rows.append(Usage(
                id=f"req_{batch}_{i}", at=chance.uniform(10 * DAY, 14 * DAY),
                key_id=chance.choice(["key_a", "key_b", None]), project_id=chance.choice(["prj_a", "prj_b", None]),
                person_id=chance.choice(["usr_a", None]), model=chance.choice(["llama", "qwen"]),
                status=chance.choice([200, 200, 200, 429, 502]), prompt_tokens=chance.randint(0, 5000),
                cached_tokens=chance.randint(0, 100), completion_tokens=chance.randint(0, 900),
                cost_micros=chance.randint(0, 10**9)))
        await store.add_usage(rows)
        sent.extend(rows)

    assert await daily_table(store_url) == grouped(sent)


async def test_a_batch_sent_again_after_a_lost_commit_is_summed_once(store, store_url):
    first = [row(1, 5 * DAY + 1), row(2, 5 * DAY + 2, status=500)]
    await store.add_usage(first)
    # The writer did not see its commit, so it sends the batch again with the next row.
    await store.add_usage(first + [row(3, 5 * DAY + 3)])
    await store.add_usage([row(4, 5 * DAY + 4), row(4, 5 * DAY + 4)])  # one id twice in one batch

    assert await daily_table(store_url) == {
        (5, "prj_a", "key_a", "usr_a", "llama"): [4, 1, 40, 0, 20, 400],
    }


async def test_days_are_utc_days_from_midnight_to_midnight(store):
    await store.add_usage([row(1, 3 * DAY - 0.001), row(2, 3 * DAY), row(3, 4 * DAY - 0.001), row(4, 4 * DAY)])

    days = await store.usage_by_day(0)

    assert [(d.day, d.requests) for d in days] == [(2, 1), (3, 2), (4, 1)]


async def test_a_persons_days_are_read_by_model_and_nobody_elses(store):
    await store.add_usage([
        row(1, 1 * DAY, model="llama", cost_micros=7),
        row(2, 1 * DAY + 60, model="qwen", cost_micros=3, status=429),
        row(3, 2 * DAY, model="llama", cost_micros=11, cached_tokens=4),
        row(4, 2 * DAY, person_id="usr_b", cost_micros=1000),
        row(5, 9 * DAY, cost_micros=1000),  # after until_day
    ])

    days = await store.usage_by_day(1, 3, person_id="usr_a")

    assert days == [
        UsageDay(1, None, "llama", 1, 0, 10, 0, 5, 7),
        UsageDay(1, None, "qwen", 1, 1, 10, 0, 5, 3),
        UsageDay(2, None, "llama", 1, 0, 10, 4, 5, 11),
    ]


async def test_days_are_grouped_by_key_project_or_person_and_filtered_by_projects_and_key(store):
    await store.add_usage([
        row(1, DAY, key_id="key_a", project_id="prj_a", person_id="usr_a", cost_micros=1),
        row(2, DAY, key_id="key_b", project_id="prj_b", person_id=None, cost_micros=2),
        row(3, DAY, key_id=None, project_id=None, person_id=None, cost_micros=4, status=401),
    ])

    by_person = await store.usage_by_day(0, by="person")
    by_project = await store.usage_by_day(0, by="project", project_ids=["prj_b", "prj_x"])
    by_key = await store.usage_by_day(0, by="key", key_id="key_a")

    assert [(d.group, d.cost_micros) for d in by_person] == [("usr_a", 1), (None, 6)]
    assert [(d.group, d.cost_micros) for d in by_project] == [("prj_b", 2)]
    assert [(d.group, d.cost_micros) for d in by_key] == [("key_a", 1)]
    assert await store.usage_by_day(0, project_ids=[]) == []


async def test_days_summed_by_something_else_are_refused_with_the_choices(store):
    with pytest.raises(StoreError) as refused:
        await store.usage_by_day(0, by="endpoint")
    assert str(refused.value) == 'usage is summed a day at a time by model, key, project, person, not "endpoint"'


async def test_spend_is_read_for_many_keys_and_projects_at_once_from_a_day_on(store):
    await store.add_usage([
        row(1, 1 * DAY, key_id="key_a", project_id="prj_a", cost_micros=5),
        row(2, 3 * DAY, key_id="key_a", project_id="prj_a", cost_micros=7),
        row(3, 3 * DAY, key_id="key_b", project_id="prj_b", cost_micros=11),
        row(4, 3 * DAY, key_id="key_c", project_id="prj_c", cost_micros=13),
    ])

    assert await store.spend_by_keys(["key_a", "key_b", "key_z"], 2) == {"key_a": 7, "key_b": 11, "key_z": 0}
    assert await store.spend_by_keys([], 0) == {}
    assert await store.spend_by_projects(["prj_a", "prj_b"], 0) == 23
    assert await store.spend_by_projects(["prj_a", "prj_b"], 2) == 18
    assert await store.spend_by_projects([], 0) == 0


async def test_more_keys_than_one_query_takes_are_all_answered(store):
    await store.add_usage([row(n, DAY, key_id=f"key_{n}", cost_micros=n) for n in range(2500)])

    spent = await store.spend_by_keys([f"key_{n}" for n in range(2500)], 0)

    assert len(spent) == 2500 and spent["key_2499"] == 2499 and sum(spent.values()) == sum(range(2500))


async def test_the_latest_guardrail_decisions_are_listed_newest_first_without_other_details(store):
    guard = {"guard": [{"rule": "pii", "action": "block", "direction": "request"}]}
    await store.add_usage([
        row(1, 10.0, detail=guard),
        row(2, 20.0, detail={"api": "chat", "error": "rate_limited"}),
        row(3, 30.0),
        row(4, 40.0, detail=guard | {"endpoint_tries": 1}),
    ])

    decisions = await store.recent_decisions()

    assert [u.id for u in decisions] == ["req_00004", "req_00001"]
    assert decisions[1].detail == guard
    assert [u.id for u in await store.recent_decisions(limit=1)] == ["req_00004"]


async def test_a_rebuild_sums_the_raw_rows_again_after_a_bulk_load(store, store_url):
    await store.add_usage([row(1, DAY), row(2, 2 * DAY, person_id=None)])
    await raw_fetch(store_url, "INSERT INTO usage (id, at, key_id, project_id, model, cost_micros) "
                               "VALUES ('bulk_1', $1, 'key_a', 'prj_a', 'llama', 9)", 2 * DAY + 5)

    await store.rebuild_usage_daily()

    assert await daily_table(store_url) == {
        (1, "prj_a", "key_a", "usr_a", "llama"): [1, 0, 10, 0, 5, 100],
        (2, "prj_a", "key_a", "", "llama"): [2, 0, 10, 0, 5, 109],
    }


async def test_upgrading_fills_in_each_rows_person_from_its_key_and_sums_the_rows_already_there(
        new_store_url, monkeypatch):
    every = migrate.known_migrations
    monkeypatch.setattr(migrate, "known_migrations", lambda dialect: tuple(
        m for m in every(dialect) if m.version < 8))
    older = await open_store(new_store_url)  # as the llmgw before usage_daily left it
    try:
        project = (await older.ensure_project("acme", "ml", "chat")).project
        # Written as that llmgw wrote it: today's add_person knows columns a version-7 store lacks.
        await older._db.execute("INSERT INTO people (id, email, email_key, name, created_at) "
                                "VALUES ('usr_a', 'a@example.com', 'a@example.com', 'A', 0)")
        for n, person in ((1, "usr_a"), (2, None)):
            await older.add_key(ApiKey(id=f"key_{n}", name=f"k{n}", project_id=project.id,
                                       digest=hashlib.sha256(str(n).encode()).digest(), prefix="sk", person_id=person))
    finally:
        await older.close()
    for n, key, at, cost, status in ((1, "key_1", DAY + 1, 5, 200), (2, "key_1", DAY + 2, 6, 503),
                                     (3, "key_2", DAY + 3, 7, 200), (4, None, 2 * DAY, 0, 401)):
        await raw_fetch(new_store_url, "INSERT INTO usage (id, at, key_id, project_id, model, status, cost_micros) "
                                   "VALUES ($1, $2, $3, $4, 'llama', $5, $6)",
                        f"old_{n}", at, key, project.id if key else None, status, cost)
    monkeypatch.setattr(migrate, "known_migrations", every)

    upgraded = await open_store(new_store_url)
    try:
        people = {u.id: u.person_id for u in await upgraded.usage_rows(0.0)}
    finally:
        await upgraded.close()

    assert people == {"old_1": "usr_a", "old_2": "usr_a", "old_3": None, "old_4": None}
    assert await daily_table(new_store_url) == {
        (1, project.id, "key_1", "usr_a", "llama"): [2, 1, 0, 0, 0, 11],
        (1, project.id, "key_2", "", "llama"): [1, 0, 0, 0, 0, 7],
        (2, "", "", "", "llama"): [1, 1, 0, 0, 0, 0],
    }


async def test_two_control_planes_writing_the_same_days_at_once_lose_no_sums(store, store_url):
    other = await open_store(store_url)
    chance = random.Random(8)
    batches = [[row(1000 * b + i, DAY + chance.uniform(0, 2 * DAY), key_id=chance.choice(["key_a", "key_b"]),
                    model=chance.choice(["llama", "qwen"]), cost_micros=chance.randint(1, 99)) for i in range(40)]
               for b in range(12)]
    try:
        await asyncio.gather(*(s.add_usage(batch) for s, batch in zip([store, other] * 6, batches, strict=True)))
    finally:
        await other.close()

    assert await daily_table(store_url) == grouped([u for batch in batches for u in batch])
