"""Usage summed a day at a time per project and model, and per person and model
(usage_project_daily and usage_person_daily, 0009): the cluster's reports and a
person's read them, and each always equals usage_daily summed again."""

from __future__ import annotations

import random

import pytest

from llmgw.store import Usage, migrate, open_store

from .rawsql import raw_fetch

DAY = 86400.0
SUMS = ("requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")


def random_batches(seed: int, batches: int = 8) -> list[list[Usage]]:
    chance = random.Random(seed)  # seeded: the same batches every run
    return [[Usage(
        id=f"req_{b}_{i}", at=chance.uniform(10 * DAY, 14 * DAY),
        key_id=chance.choice(["key_a", "key_b", "key_c", None]),
        project_id=chance.choice(["prj_a", "prj_b", None]), person_id=chance.choice(["usr_a", "usr_b", None]),
        model=chance.choice(["llama", "qwen"]), status=chance.choice([200, 200, 200, 429, 502]),
        prompt_tokens=chance.randint(0, 5000), cached_tokens=chance.randint(0, 100),
        completion_tokens=chance.randint(0, 900), cost_micros=chance.randint(0, 10**9))
        for i in range(chance.randint(1, 60))] for b in range(batches)]


ROLLUPS = {"usage_project_daily": "project_id", "usage_person_daily": "person_id"}


async def rollup_table(store_url: str, table: str = "usage_project_daily") -> dict[tuple, list[int]]:
    rows = await raw_fetch(store_url, f"SELECT day, {ROLLUPS[table]}, model, {', '.join(SUMS)} FROM {table}")
    return {tuple(r[:3]): [int(v) for v in r[3:]] for r in rows}


async def daily_summed_per_project(store_url: str, table: str = "usage_project_daily") -> dict[tuple, list[int]]:
    """What a rollup should hold: usage_daily summed again per day, project (or person) and model."""
    rows = await raw_fetch(store_url, f"SELECT day, {ROLLUPS[table]}, model, {', '.join(SUMS)} FROM usage_daily")
    out: dict[tuple, list[int]] = {}
    for r in rows:
        total = out.setdefault(tuple(r[:3]), [0] * 6)
        for i, value in enumerate(r[3:]):
            total[i] += int(value)
    return out


@pytest.mark.parametrize("table", ROLLUPS)
async def test_each_rollup_equals_the_day_sums_after_many_random_batches_and_a_retry(store, store_url, table):
    batches = random_batches(13)
    for batch in batches:
        await store.add_usage(batch)
    await store.add_usage(batches[2] + batches[5])  # sent again after a lost commit: counted once

    rollup = await rollup_table(store_url, table)

    assert rollup == await daily_summed_per_project(store_url, table)
    assert sum(r[0] for r in rollup.values()) == sum(len(b) for b in batches)


async def test_a_cluster_report_without_a_person_or_key_has_the_same_sums_as_the_raw_rows(store):
    sent = [u for batch in random_batches(5) for u in batch]
    await store.add_usage(sent)

    by_model = await store.usage_by_day(11, 14)
    by_project = await store.usage_by_day(0, by="project", project_ids=["prj_a", "prj_x"])

    model_cost: dict[tuple, int] = {}
    project_requests: dict[tuple, int] = {}
    for u in sent:
        day = int(u.at // DAY)
        if 11 <= day < 14:
            model_cost[(day, u.model)] = model_cost.get((day, u.model), 0) + u.cost_micros
        if u.project_id == "prj_a":
            project_requests[day] = project_requests.get(day, 0) + 1
    assert {(d.day, d.model): d.cost_micros for d in by_model} == model_cost
    assert {d.group for d in by_model} == {None}
    assert {d.day: d.requests for d in by_project} == project_requests  # a day's models summed
    assert {(d.group, d.model) for d in by_project} == {("prj_a", "")}


async def test_a_persons_report_and_the_cluster_by_person_have_the_same_sums_as_the_raw_rows(store):
    sent = [u for batch in random_batches(9) for u in batch]
    await store.add_usage(sent)

    mine = await store.usage_by_day(11, 14, person_id="usr_a")
    by_person = await store.usage_by_day(0, by="person")
    mine_in_a = await store.usage_by_day(0, person_id="usr_a", project_ids=["prj_a"])  # usage_daily's

    mine_cost: dict[tuple, int] = {}
    person_requests: dict[tuple, int] = {}
    in_a = 0
    for u in sent:
        day = int(u.at // DAY)
        if u.person_id == "usr_a" and 11 <= day < 14:
            mine_cost[(day, u.model)] = mine_cost.get((day, u.model), 0) + u.cost_micros
        person_requests[(day, u.person_id)] = person_requests.get((day, u.person_id), 0) + 1
        in_a += u.person_id == "usr_a" and u.project_id == "prj_a"
    assert {(d.day, d.model): d.cost_micros for d in mine} == mine_cost
    assert {(d.day, d.group): d.requests for d in by_person} == person_requests
    assert sum(d.requests for d in mine_in_a) == in_a


async def test_a_team_or_orgs_spend_is_read_from_the_rollup(store):
    await store.add_usage([
        Usage(id="r1", at=1 * DAY, key_id="key_a", project_id="prj_a", person_id="usr_a", model="m", cost_micros=5),
        Usage(id="r2", at=3 * DAY, key_id="key_b", project_id="prj_a", person_id="usr_b", model="m", cost_micros=7),
        Usage(id="r3", at=3 * DAY, key_id="key_c", project_id="prj_b", model="n", cost_micros=11),
    ])

    assert await store.spend_by_projects(["prj_a", "prj_b"], 0) == 23
    assert await store.spend_by_projects(["prj_a"], 2) == 7


async def test_a_rebuild_sums_the_rollups_again_with_the_day_sums(store, store_url):
    for batch in random_batches(21, batches=3):
        await store.add_usage(batch)
    for table in ROLLUPS:
        await raw_fetch(store_url, f"DELETE FROM {table}")
    await raw_fetch(store_url, "INSERT INTO usage (id, at, key_id, project_id, model, cost_micros) "
                               "VALUES ('bulk_1', $1, 'key_a', 'prj_a', 'llama', 9)", 12 * DAY + 5)

    await store.rebuild_usage_daily()

    for table in ROLLUPS:
        assert await rollup_table(store_url, table) == await daily_summed_per_project(store_url, table)
    assert (await rollup_table(store_url))[(12, "prj_a", "llama")][5] >= 9


async def test_upgrading_from_version_8_sums_the_days_already_there_per_project(new_store_url, monkeypatch):
    every = migrate.known_migrations
    monkeypatch.setattr(migrate, "known_migrations", lambda dialect: tuple(
        m for m in every(dialect) if m.version < 9))
    older = await open_store(new_store_url)  # migrated as far as the llmgw before the rollup
    await older.close()
    # That llmgw's add_usage kept usage_daily alone: written here as it did.
    for day, project, key, person, model, cost in ((10, "prj_a", "key_a", "usr_a", "llama", 5),
                                                   (10, "prj_a", "key_b", "", "llama", 7),
                                                   (10, "prj_a", "key_b", "", "qwen", 11),
                                                   (11, "", "", "", "llama", 0)):
        await raw_fetch(new_store_url, f"INSERT INTO usage_daily (day, project_id, key_id, person_id, model, "
                                   f"{', '.join(SUMS)}) VALUES ($1, $2, $3, $4, $5, 2, 1, 10, 0, 5, $6)",
                        day, project, key, person, model, cost)
    assert not [r for r in await raw_fetch(new_store_url, "SELECT version FROM schema_migrations") if r[0] >= 9]
    monkeypatch.setattr(migrate, "known_migrations", every)

    upgraded = await open_store(new_store_url)
    await upgraded.close()

    assert await rollup_table(new_store_url) == {
        (10, "prj_a", "llama"): [4, 2, 20, 0, 10, 12],
        (10, "prj_a", "qwen"): [2, 1, 10, 0, 5, 11],
        (11, "", "llama"): [2, 1, 10, 0, 5, 0],
    }
    assert await rollup_table(new_store_url, "usage_person_daily") == {
        (10, "usr_a", "llama"): [2, 1, 10, 0, 5, 5],
        (10, "", "llama"): [2, 1, 10, 0, 5, 7],
        (10, "", "qwen"): [2, 1, 10, 0, 5, 11],
        (11, "", "llama"): [2, 1, 10, 0, 5, 0],
    }


# The day totals (0010): the same sums per day and project (or person) over every model.
TOTALS = {"usage_project_day_totals": "project_id", "usage_person_day_totals": "person_id"}


async def totals_table(store_url: str, table: str) -> dict[tuple, list[int]]:
    rows = await raw_fetch(store_url, f"SELECT day, {TOTALS[table]}, {', '.join(SUMS)} FROM {table}")
    return {tuple(r[:2]): [int(v) for v in r[2:]] for r in rows}


async def daily_summed_per_day(store_url: str, table: str) -> dict[tuple, list[int]]:
    """What a day total should hold: usage_daily summed again per day and project (or person)."""
    rows = await raw_fetch(store_url, f"SELECT day, {TOTALS[table]}, {', '.join(SUMS)} FROM usage_daily")
    out: dict[tuple, list[int]] = {}
    for r in rows:
        total = out.setdefault(tuple(r[:2]), [0] * 6)
        for i, value in enumerate(r[2:]):
            total[i] += int(value)
    return out


@pytest.mark.parametrize("table", TOTALS)
async def test_each_day_total_equals_the_day_sums_after_many_random_batches_and_a_retry(store, store_url, table):
    batches = random_batches(17)
    for batch in batches:
        await store.add_usage(batch)
    await store.add_usage(batches[1] + batches[6])  # sent again after a lost commit: counted once

    totals = await totals_table(store_url, table)

    assert totals == await daily_summed_per_day(store_url, table)
    assert sum(r[0] for r in totals.values()) == sum(len(b) for b in batches)


@pytest.mark.parametrize("by", ["project", "person"])
async def test_a_report_by_project_or_person_reads_the_same_sums_as_usage_daily(store, by):
    sent = [u for batch in random_batches(29) for u in batch]
    await store.add_usage(sent)

    read = await store.usage_by_day(11, 14, by=by)
    narrowed = await store.usage_by_day(0, by="project", project_ids=["prj_a", "prj_x"])
    theirs = await store.usage_by_day(0, by="person", person_id="usr_b")

    expected: dict[tuple, list[int]] = {}
    for u in sent:
        day = int(u.at // DAY)
        if 11 <= day < 14:
            total = expected.setdefault((day, u.project_id if by == "project" else u.person_id), [0] * 6)
            for i, value in enumerate((1, u.status >= 400, u.prompt_tokens, u.cached_tokens,
                                       u.completion_tokens, u.cost_micros)):
                total[i] += int(value)
    assert {(d.day, d.group): [getattr(d, s) for s in SUMS] for d in read} == expected
    assert {d.model for d in read} == {""}
    assert {type(getattr(d, s)) for d in read for s in ("day", *SUMS)} == {int}  # read with no int()
    assert [(d.day, d.group) for d in read] == sorted(
        ((d.day, d.group) for d in read), key=lambda k: (k[0], k[1] is None, k[1] or ""))
    assert {d.group for d in narrowed} == {"prj_a"}
    assert sum(d.requests for d in narrowed) == sum(u.project_id == "prj_a" for u in sent)
    assert {d.group for d in theirs} == {"usr_b"}
    assert sum(d.requests for d in theirs) == sum(u.person_id == "usr_b" for u in sent)


async def test_a_rebuild_sums_the_day_totals_again(store, store_url):
    for batch in random_batches(23, batches=3):
        await store.add_usage(batch)
    for table in TOTALS:
        await raw_fetch(store_url, f"DELETE FROM {table}")

    await store.rebuild_usage_daily()

    for table in TOTALS:
        assert await totals_table(store_url, table) == await daily_summed_per_day(store_url, table)
        assert await totals_table(store_url, table)


async def test_upgrading_from_version_9_sums_the_days_already_there_per_project_and_person(new_store_url, monkeypatch):
    every = migrate.known_migrations
    monkeypatch.setattr(migrate, "known_migrations", lambda dialect: tuple(
        m for m in every(dialect) if m.version < 10))
    older = await open_store(new_store_url)  # migrated as far as the llmgw before the day totals
    await older.close()
    # That llmgw's add_usage kept usage_daily and the rollups: written here as it did.
    for day, project, key, person, model, cost in ((10, "prj_a", "key_a", "usr_a", "llama", 5),
                                                   (10, "prj_a", "key_b", "", "llama", 7),
                                                   (10, "prj_a", "key_b", "", "qwen", 11),
                                                   (11, "", "", "", "llama", 0)):
        await raw_fetch(new_store_url, f"INSERT INTO usage_daily (day, project_id, key_id, person_id, model, "
                                   f"{', '.join(SUMS)}) VALUES ($1, $2, $3, $4, $5, 2, 1, 10, 0, 5, $6)",
                        day, project, key, person, model, cost)
    for table, column in ROLLUPS.items():
        await raw_fetch(new_store_url, f"INSERT INTO {table} (day, {column}, model, {', '.join(SUMS)}) "
                                   f"SELECT day, {column}, model, {', '.join(f'SUM({s})' for s in SUMS)} "
                                   f"FROM usage_daily GROUP BY day, {column}, model")
    assert not [r for r in await raw_fetch(new_store_url, "SELECT version FROM schema_migrations") if r[0] >= 10]
    monkeypatch.setattr(migrate, "known_migrations", every)

    upgraded = await open_store(new_store_url)
    await upgraded.close()

    assert await totals_table(new_store_url, "usage_project_day_totals") == {
        (10, "prj_a"): [6, 3, 30, 0, 15, 23],
        (11, ""): [2, 1, 10, 0, 5, 0],
    }
    assert await totals_table(new_store_url, "usage_person_day_totals") == {
        (10, "usr_a"): [2, 1, 10, 0, 5, 5],
        (10, ""): [4, 2, 20, 0, 10, 18],
        (11, ""): [2, 1, 10, 0, 5, 0],
    }
