"""Reading usage back: budgets to restore, summaries, one request, exports page by page."""

from __future__ import annotations

import pytest

from llmgw.store import Limits, StoreError, Usage

from .rawsql import raw_fetch


def row(n: int, at: float, **kw) -> Usage:
    base = dict(id=f"req_{n:05d}", at=at, key_id="key_a", project_id="prj_a", model="llama")
    base.update(kw)
    return Usage(**base)


async def test_every_level_with_a_budget_is_listed_and_levels_without_one_are_not(store):
    await store.put_limits(Limits("team", "team_1", budget_micros=25_000_000, period="month"))
    await store.put_limits(Limits("key", "key_1", rpm=60))  # no budget
    await store.put_limits(Limits("key", "key_2", budget_micros=0, period="day"))  # a budget of nothing
    await store.put_limits(Limits("org", "org_1", budget_micros=1_000_000_000))

    assert await store.list_budgets() == [
        Limits("key", "key_2", budget_micros=0, period="day"),
        Limits("org", "org_1", budget_micros=1_000_000_000),
        Limits("team", "team_1", budget_micros=25_000_000, period="month"),
    ]


async def test_a_summary_by_key_counts_requests_errors_tokens_and_money_most_costly_first(store):
    await store.add_usage([
        row(1, 100.0, key_id="key_a", prompt_tokens=10, cached_tokens=4, completion_tokens=20, cost_micros=30),
        row(2, 101.0, key_id="key_a", status=429, cost_micros=0),
        row(3, 102.0, key_id="key_a", status=502, prompt_tokens=5, cost_micros=1),
        row(4, 103.0, key_id="key_b", prompt_tokens=1000, completion_tokens=1, cost_micros=5000),
        row(5, 104.0, key_id=None, project_id=None, status=401),
        row(6, 500.0, key_id="key_a", cost_micros=99_999),  # after `until`
    ])

    summary = await store.usage_summary(since=100.0, until=500.0, by="key")

    assert summary == [
        {"group": "key_b", "requests": 1, "errors": 0, "prompt_tokens": 1000, "cached_tokens": 0,
         "completion_tokens": 1, "cost_micros": 5000},
        {"group": "key_a", "requests": 3, "errors": 2, "prompt_tokens": 15, "cached_tokens": 4,
         "completion_tokens": 20, "cost_micros": 31},
        {"group": None, "requests": 1, "errors": 1, "prompt_tokens": 0, "cached_tokens": 0,
         "completion_tokens": 0, "cost_micros": 0},
    ]


async def test_a_summary_groups_by_project_or_by_model_and_is_exact_in_micro_units(store):
    await store.add_usage(
        [row(n, float(n), project_id="prj_a", model="llama", cost_micros=1) for n in range(3000)]
        + [row(n, float(n), project_id="prj_b", model="qwen", cost_micros=7) for n in range(3000, 3010)]
    )

    by_project = await store.usage_summary(since=0.0, by="project")
    by_model = await store.usage_summary(since=0.0, by="model")

    assert [(g["group"], g["requests"], g["cost_micros"]) for g in by_project] == [
        ("prj_a", 3000, 3000), ("prj_b", 10, 70)]
    assert [(g["group"], g["requests"], g["cost_micros"]) for g in by_model] == [
        ("llama", 3000, 3000), ("qwen", 10, 70)]


async def test_a_summary_of_a_quiet_time_is_empty(store):
    assert await store.usage_summary(since=0.0, until=10.0, by="model") == []


async def test_a_summary_by_something_else_is_refused_with_the_choices(store):
    with pytest.raises(StoreError, match='usage cannot be summed by "person"; use one of key, project, model'):
        await store.usage_summary(since=0.0, by="person")


async def test_one_request_is_found_by_its_id_with_its_detail(store):
    wanted = row(7, 70.0, endpoint="vllm@10.0.0.7:8000", status=429,
                 detail={"limited_by": "team", "retries": [{"endpoint": "a", "status": 503}]})
    await store.add_usage([row(6, 60.0), wanted])

    assert await store.usage_by_id("req_00007") == wanted
    assert await store.usage_by_id("req_missing") is None


async def test_an_export_reads_every_row_once_page_by_page_even_rows_at_the_same_instant(store):
    # Many rows share a time (a batch stamped in one millisecond): paging on
    # the time alone would skip or repeat them at a page's edge.
    rows = [row(n, 1000.0 + n // 7, cost_micros=n) for n in range(250)]
    await store.add_usage(rows)

    seen: list[Usage] = []
    after_at = after_id = None
    pages = 0
    while True:
        page = await store.usage_page(since=0.0, until=None, after_at=after_at, after_id=after_id, limit=40)
        if not page:
            break
        pages += 1
        seen.extend(page)
        after_at, after_id = page[-1].at, page[-1].id

    assert [u.id for u in seen] == [u.id for u in rows]
    assert pages == 7


async def test_an_export_keeps_to_its_time_range(store):
    await store.add_usage([row(n, float(n)) for n in range(10)])

    page = await store.usage_page(since=3.0, until=6.0, limit=100)

    assert [u.id for u in page] == ["req_00003", "req_00004", "req_00005"]


async def test_pages_of_an_export_are_read_in_order_from_an_index_not_sorted_each_time(store, store_url):
    # The export's pages must stay as cheap at the millionth row as at the
    # first; the (at, id) index is what makes a page a range read.
    if store_url.startswith("sqlite:"):
        found = await raw_fetch(store_url, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage'")
    else:
        found = await raw_fetch(store_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'usage'")
    names = {r[0] for r in found}
    assert "usage_at_id" in names and "usage_at" not in names
