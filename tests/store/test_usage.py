"""Usage rows: written in batches, counted once, summed at each level."""

from __future__ import annotations

import pytest

from llmgw.store import StoreError, Usage


def usage(n: int, at: float, cost: int, key_id: str | None = "key_a", project_id: str | None = None,
          **kw) -> Usage:
    return Usage(id=f"req_{n}", at=at, key_id=key_id, project_id=project_id, model="llama",
                 cost_micros=cost, **kw)


async def test_a_batch_is_read_back_with_every_field(store):
    row = Usage(id="req_1", at=1000.25, key_id="key_a", project_id="prj_a", model="llama-3-8b",
                endpoint="/v1/chat/completions", status=429, prompt_tokens=12, cached_tokens=4,
                completion_tokens=30, cost_micros=1234, ttft_ms=85.5, duration_ms=912.0,
                cache="similar", detail={"limited_by": "key", "retries": [1, 2]})
    bare = usage(2, 1001.0, 0, key_id=None)
    await store.add_usage([row, bare])

    assert await store.usage_rows(since=0) == [row, bare]


async def test_a_batch_sent_twice_is_counted_once(store):
    batch = [usage(n, 1000.0 + n, 100) for n in range(50)]
    await store.add_usage(batch)
    # The writer retries when it did not see the commit: a part of the
    # batch again, with new rows after it.
    await store.add_usage(batch[40:] + [usage(99, 2000.0, 7)])

    assert len(await store.usage_rows(since=0)) == 51
    assert await store.spend_since("key", "key_a", since=0) == 50 * 100 + 7


async def test_an_empty_batch_writes_nothing(store):
    await store.add_usage([])
    assert await store.usage_rows(since=0) == []


async def test_usage_rows_are_filtered_by_time_key_and_project_oldest_first(store):
    await store.add_usage([
        usage(1, 100.0, 1, key_id="key_a", project_id="prj_a"),
        usage(2, 200.0, 1, key_id="key_b", project_id="prj_a"),
        usage(3, 300.0, 1, key_id="key_a", project_id="prj_b"),
        usage(4, 400.0, 1, key_id="key_a", project_id="prj_a"),
    ])

    def ids(rows):
        return [r.id for r in rows]

    assert ids(await store.usage_rows(since=200.0)) == ["req_2", "req_3", "req_4"]
    assert ids(await store.usage_rows(since=100.0, until=300.0)) == ["req_1", "req_2"]
    assert ids(await store.usage_rows(since=0, key_id="key_a")) == ["req_1", "req_3", "req_4"]
    assert ids(await store.usage_rows(since=0, project_id="prj_a", key_id="key_a")) == ["req_1", "req_4"]
    assert ids(await store.usage_rows(since=0, limit=2)) == ["req_1", "req_2"]


async def test_spend_is_summed_for_a_key_a_project_a_team_and_an_org_since_a_time(store):
    chat = await store.ensure_project("acme", "research", "chat")
    search = await store.ensure_project("acme", "research", "search")
    sales = await store.ensure_project("acme", "sales", "crm")
    rival = await store.ensure_project("globex", "research", "chat")
    await store.add_usage([
        usage(1, 50.0, 1_000_000, key_id="key_1", project_id=chat.project.id),  # before `since`
        usage(2, 100.0, 250_000, key_id="key_1", project_id=chat.project.id),
        usage(3, 150.0, 30_000, key_id="key_2", project_id=search.project.id),
        usage(4, 200.0, 4_000, key_id="key_3", project_id=sales.project.id),
        usage(5, 250.0, 500, key_id="key_4", project_id=rival.project.id),
    ])

    assert await store.spend_since("key", "key_1", since=100.0) == 250_000
    assert await store.spend_since("project", chat.project.id, since=100.0) == 250_000
    assert await store.spend_since("team", chat.team.id, since=100.0) == 280_000
    assert await store.spend_since("org", chat.org.id, since=100.0) == 284_000
    assert await store.spend_since("org", chat.org.id, since=0.0) == 1_284_000
    assert await store.spend_since("org", rival.org.id, since=0.0) == 500


async def test_spend_where_nothing_was_spent_is_zero(store):
    assert await store.spend_since("key", "key_idle", since=0.0) == 0
    assert await store.spend_since("org", "org_idle", since=0.0) == 0


async def test_spend_is_exact_in_micro_units_however_many_rows(store):
    # One micro-unit a row, twenty thousand rows: floats would drift here.
    await store.add_usage([usage(n, float(n), 1) for n in range(20_000)])
    assert await store.spend_since("key", "key_a", since=0.0) == 20_000


async def test_spend_for_a_level_that_is_not_one_is_refused(store):
    with pytest.raises(StoreError, match='"person" is not a level of spend; use one of org, team, project, key'):
        await store.spend_since("person", "psn_1", since=0.0)


async def test_a_request_is_found_by_the_id_its_answer_gave_the_client_as_well_as_its_own(store):
    await store.add_usage([usage(1, 1000.0, 0, answer_id="chatcmpl-abc"),
                           usage(2, 1001.0, 0, answer_id="msg_def")])

    assert (await store.usage_by_id("req_1")).answer_id == "chatcmpl-abc"
    assert (await store.usage_by_id("chatcmpl-abc")).id == "req_1"
    assert (await store.usage_by_id("msg_def")).id == "req_2"
    assert await store.usage_by_id("msg_nothing") is None


async def test_an_answer_replayed_from_the_cache_finds_its_latest_request(store):
    # A cache hit gives the client the id the answer was first given.
    await store.add_usage([usage(1, 1000.0, 0, answer_id="chatcmpl-same"),
                           usage(2, 1005.0, 0, answer_id="chatcmpl-same", cache="hit")])

    assert (await store.usage_by_id("chatcmpl-same")).id == "req_2"


async def test_recent_requests_are_newest_first_and_filtered_by_key_model_status_and_time(store):
    await store.add_usage([
        usage(1, 1000.0, 0),
        usage(2, 1001.0, 0, key_id="key_b"),
        usage(3, 1002.0, 0, status=503),
        Usage(id="req_4", at=1003.0, key_id="key_a", project_id=None, model="qwen", status=429),
    ])

    assert [u.id for u in await store.recent_usage()] == ["req_4", "req_3", "req_2", "req_1"]
    assert [u.id for u in await store.recent_usage(limit=2)] == ["req_4", "req_3"]
    assert [u.id for u in await store.recent_usage(key_id="key_b")] == ["req_2"]
    assert [u.id for u in await store.recent_usage(model="qwen")] == ["req_4"]
    assert [u.id for u in await store.recent_usage(status=503)] == ["req_3"]
    assert [u.id for u in await store.recent_usage(errors=True)] == ["req_4", "req_3"]
    assert [u.id for u in await store.recent_usage(since=1002.0)] == ["req_4", "req_3"]
