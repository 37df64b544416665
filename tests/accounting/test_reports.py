"""Usage reports as people read them: days by model, spend against budgets, exports."""

from __future__ import annotations

import csv
import datetime as dt
import io

import orjson
import pytest

from llmgw.accounting import UsageReports
from llmgw.accounting.reports import ALL_FAILED, NOTHING_USED, nothing_shown
from llmgw.store import Usage

DAY = 86400


def utc(*when: int) -> float:
    return dt.datetime(*when, tzinfo=dt.UTC).timestamp()


def row(n: int, at: float, **kw) -> Usage:
    base = dict(id=f"req_{n:05d}", at=at, key_id="key_a", project_id="prj_a", person_id="usr_a",
                model="llama", prompt_tokens=10, completion_tokens=5, cost_micros=100)
    base.update(kw)
    return Usage(**base)


async def test_a_persons_days_have_one_entry_a_day_for_each_model_with_empty_days_shown(store):
    await store.add_usage([
        row(1, utc(2026, 3, 1, 9), model="llama", cost_micros=300),
        row(2, utc(2026, 3, 1, 23, 59), model="qwen", cost_micros=50, status=429),
        row(3, utc(2026, 3, 3, 0, 0), model="llama", cost_micros=200),
        row(4, utc(2026, 3, 3, 1), model="llama", person_id="usr_b", cost_micros=9999),
    ])

    series = await UsageReports(store).by_day(since=utc(2026, 3, 1, 12), until=utc(2026, 3, 3, 12),
                                              person_id="usr_a")

    first = utc(2026, 3, 1) // DAY
    assert series.days == [first, first + 1, first + 2]
    assert list(series.groups) == ["llama", "qwen"]  # most costly first
    assert [d.cost_micros for d in series.groups["llama"]] == [300, 0, 200]
    assert [d.requests for d in series.groups["qwen"]] == [1, 0, 0]
    assert [d.day for d in series.groups["qwen"]] == series.days
    assert (series.totals.requests, series.totals.errors, series.totals.cost_micros) == (3, 1, 550)


async def test_days_by_key_sum_every_model_of_each_key(store):
    await store.add_usage([
        row(1, utc(2026, 3, 1, 9), key_id="key_a", model="llama", cost_micros=1),
        row(2, utc(2026, 3, 1, 9), key_id="key_a", model="qwen", cost_micros=2),
        row(3, utc(2026, 3, 1, 9), key_id=None, model="qwen", cost_micros=4, status=401),
    ])

    series = await UsageReports(store).by_day(since=utc(2026, 3, 1), until=utc(2026, 3, 2), by="key")

    assert series.days == [utc(2026, 3, 1) // DAY]
    assert {name: [(d.requests, d.cost_micros) for d in days] for name, days in series.groups.items()} == {
        "": [(1, 4)], "key_a": [(2, 3)]}
    assert list(series.groups) == ["", "key_a"]


async def test_a_report_by_something_that_is_not_a_group_is_refused_with_the_choices(store):
    with pytest.raises(ValueError) as refused:
        await UsageReports(store).by_day(since=0, until=DAY, by="endpoint")
    assert str(refused.value) == 'usage is reported by model, key, project, person, not "endpoint"'


async def test_a_keys_spend_is_its_utc_days_and_its_utc_months(store):
    now = utc(2026, 3, 15, 12)
    await store.add_usage([
        row(1, utc(2026, 2, 28, 23), key_id="key_a", cost_micros=1000),  # last month
        row(2, utc(2026, 3, 2), key_id="key_a", cost_micros=20),
        row(3, utc(2026, 3, 15, 0, 0, 1), key_id="key_a", cost_micros=3),
        row(4, utc(2026, 3, 15, 11), key_id="key_b", cost_micros=7),
    ])

    spend = await UsageReports(store).key_spend(["key_a", "key_b", "key_c"], now)

    assert spend == {"key_a": {"day": 3, "month": 23}, "key_b": {"day": 7, "month": 7},
                     "key_c": {"day": 0, "month": 0}}


async def test_a_teams_spend_is_its_projects_and_an_orgs_its_teams(store):
    chat = await store.ensure_project("Acme", "ml", "chat")
    search = await store.ensure_project("Acme", "ml", "search")
    ops = await store.ensure_project("Acme", "ops", "pager")
    other = await store.ensure_project("Other", "ml", "chat")
    now = utc(2026, 3, 15, 12)
    await store.add_usage([
        row(1, utc(2026, 3, 15, 1), project_id=chat.project.id, cost_micros=1),
        row(2, utc(2026, 3, 15, 2), project_id=search.project.id, cost_micros=20),
        row(3, utc(2026, 3, 1, 2), project_id=search.project.id, cost_micros=300),
        row(4, utc(2026, 3, 15, 3), project_id=ops.project.id, cost_micros=4000),
        row(5, utc(2026, 3, 15, 3), project_id=other.project.id, cost_micros=50000),
    ])
    reports = UsageReports(store)

    assert await reports.scope_spend("team", chat.team.id, "day", now) == 21
    assert await reports.scope_spend("team", chat.team.id, "month", now) == 321
    assert await reports.scope_spend("org", chat.org.id, "month", now) == 4321
    assert await reports.scope_spend("project", search.project.id, "month", now) == 320
    assert await reports.scope_spend("key", "key_a", "month", now) == 54321
    with pytest.raises(ValueError):
        await reports.scope_spend("galaxy", "x", "day", now)


async def test_a_persons_export_has_only_their_rows_in_the_columns_exports_always_had(store):
    await store.add_usage([row(n, 1000.0 + n, person_id="usr_a" if n % 2 else "usr_b") for n in range(2501)])

    chunks = [c async for c in UsageReports(store).export(since=0, until=10_000, fmt="csv", person_id="usr_a")]
    lines = list(csv.DictReader(io.StringIO(b"".join(chunks).decode())))
    jsonl = b"".join([c async for c in UsageReports(store).export(since=0, until=10_000, fmt="jsonl")])

    assert len(chunks) == 2 and len(lines) == 1250  # a page is 1000 rows
    assert lines[0]["id"] == "req_00001" and "person_id" not in lines[0]
    first = orjson.loads(jsonl.splitlines()[0])
    assert len(jsonl.splitlines()) == 2501 and first["id"] == "req_00000" and "person_id" not in first


async def test_an_export_of_no_projects_is_a_header_alone(store):
    await store.add_usage([row(1, 1000.0)])

    chunks = [c async for c in UsageReports(store).export(since=0, until=10_000, fmt="csv", project_ids=[])]

    assert b"".join(chunks).decode().splitlines() == [
        "id,at,time,key_id,project_id,model,endpoint,status,prompt_tokens,cached_tokens,completion_tokens,"
        "cost_micros,ttft_ms,duration_ms,cache,detail,answer_id"]


@pytest.mark.parametrize(("requests", "errors", "value", "metric", "said"), [
    (0, 0, 0, "cost_micros", NOTHING_USED),
    (15, 0, 0, "cost_micros", "No spend in this span: the models used cost nothing."),
    (15, 0, 0, "completion_tokens", "No completion tokens were counted in this span's requests."),
    (3, 3, 0, "cost_micros", ALL_FAILED),
    (3, 0, 0, "errors", "No request in this span failed."),
    (15, 0, 15, "requests", None),
    (15, 0, 2_000, "cost_micros", None),
])
def test_a_view_with_nothing_to_draw_says_whether_anything_was_used_and_what_it_lacked(
        requests, errors, value, metric, said):
    assert nothing_shown(requests=requests, errors=errors, value=value, metric=metric) == said
