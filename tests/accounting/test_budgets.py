"""Budgets: money a day or a month at every level, kept across restarts and control planes."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

from llmgw.accounting import Budgets, period_end, period_start
from llmgw.store import Limits, Usage

from .principals import principal, set_limits


def utc(*args) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


NOW = utc(2026, 3, 15, 12, 0, 0)
MONTH_LEFT = int(utc(2026, 4, 1) - NOW)


def spent_row(n: int, at: float, key, cost: int) -> Usage:
    return Usage(id=f"req_{n}", at=at, key_id=key.key.id, project_id=key.path.project.id,
                 model="llama", cost_micros=cost)


def test_periods_are_utc_days_and_months_and_december_turns_into_january():
    assert period_start("day", utc(2026, 3, 15, 23, 59, 59)) == utc(2026, 3, 15)
    assert period_end("day", utc(2026, 3, 15, 0, 0, 0)) == utc(2026, 3, 16)
    assert period_start("month", utc(2026, 2, 28, 23, 0)) == utc(2026, 2, 1)
    assert period_end("month", utc(2026, 2, 10)) == utc(2026, 3, 1)
    assert period_end("month", utc(2026, 12, 31, 23, 59)) == utc(2027, 1, 1)


async def test_a_spent_team_budget_is_refused_with_402_naming_the_team_and_its_money(store):
    key = await principal(store)
    await set_limits(store, "team", key.path.team.id, budget_micros=25_000_000, period="month")
    key = await principal(store)
    budgets = Budgets(store)
    await budgets.restore(NOW)

    budgets.charge(key, 24_999_999, NOW)
    assert budgets.check(key, NOW) is None
    budgets.charge(key, 1, NOW)
    refused = budgets.check(key, NOW)

    assert refused.code == "budget_exceeded" and refused.status == 402
    assert refused.message == "the team Acme/ml has spent its 25.00 for this month"
    assert refused.scope == "team" and refused.scope_id == key.path.team.id
    assert refused.retry_after == MONTH_LEFT


async def test_a_daily_key_budget_comes_back_at_midnight_utc(store):
    key = await principal(store)
    await set_limits(store, "key", key.key.id, budget_micros=5_000_000, period="day")
    key = await principal(store)
    budgets = Budgets(store)
    await budgets.restore(NOW)
    budgets.charge(key, 5_000_000, NOW)

    refused = budgets.check(key, utc(2026, 3, 15, 23, 59, 30))
    assert refused.message == "the key demo has spent its 5.00 for today"
    assert refused.retry_after == 30
    assert budgets.check(key, utc(2026, 3, 16, 0, 0, 1)) is None
    assert budgets.spent("key", key.key.id, "day", utc(2026, 3, 16, 0, 0, 1)) == 0


async def test_a_budget_survives_a_restart_by_reading_the_periods_usage(store):
    key = await principal(store)
    other = await principal(store, "Acme/ml/search", "other")
    await set_limits(store, "team", key.path.team.id, budget_micros=1_000_000, period="month")
    await store.add_usage([
        spent_row(1, utc(2026, 2, 28, 23, 59), key, 5_000_000),  # last month: not this one's
        spent_row(2, utc(2026, 3, 2), key, 600_000),
        spent_row(3, utc(2026, 3, 3), other, 400_000),  # another key of the same team
    ])
    key = await principal(store)

    restarted = Budgets(store)
    assert await restarted.restore(NOW) == 1

    assert restarted.spent("team", key.path.team.id, "month", NOW) == 1_000_000
    assert restarted.check(key, NOW).message == "the team Acme/ml has spent its 1.00 for this month"


async def test_catching_up_raises_but_never_lowers(store):
    mine = await principal(store, "Acme/ml/chat", "mine")
    theirs = await principal(store, "Acme/ops/infra", "theirs")
    for key in (mine, theirs):
        await set_limits(store, "key", key.key.id, budget_micros=10_000_000)
    mine, theirs = await principal(store, "Acme/ml/chat", "mine"), await principal(store, "Acme/ops/infra", "theirs")
    budgets = Budgets(store)
    await budgets.restore(NOW)
    # Spent here and not yet written: the store is behind this process.
    budgets.charge(mine, 900, NOW)
    budgets.charge(theirs, 100, NOW)
    # Another control plane's spend arrives through the store.
    await store.add_usage([spent_row(1, NOW - 60, mine, 400), spent_row(2, NOW - 60, theirs, 700)])

    await budgets.catch_up(NOW)

    assert budgets.spent("key", mine.key.id, "month", NOW) == 900
    assert budgets.spent("key", theirs.key.id, "month", NOW) == 700


async def test_a_budget_set_on_a_level_not_yet_counted_is_read_from_the_store_without_holding_the_request(store):
    key = await principal(store)
    budgets = Budgets(store)
    await budgets.restore(NOW)
    await store.add_usage([spent_row(1, NOW - 3600, key, 2_000_000)])
    # Set a moment ago, on another control plane: this one has no counter for it.
    await set_limits(store, "project", key.path.project.id, budget_micros=2_000_000)
    key = await principal(store)  # the chain re-read, as the key cache does after a limits change

    # Counted from 0 while the store is read: the request is not held for it.
    assert budgets.check(key, NOW) is None
    await budgets.settle()

    refused = budgets.check(key, NOW)
    assert refused.message == "the project Acme/ml/chat has spent its 2.00 for this month"


async def test_a_control_plane_sees_anothers_spend_within_its_catch_up_interval(store_url):
    from llmgw.store import open_store

    first, second = await open_store(store_url), await open_store(store_url)
    try:
        key = await principal(first)
        await set_limits(first, "org", key.path.org.id, budget_micros=3_000_000, period="day")
        key = await principal(first)
        here = Budgets(first, interval=0.05)
        there = Budgets(second, interval=0.05)
        await here.restore()
        await there.restore()
        here.start()
        try:
            assert here.check(key) is None
            # The other control plane answers and writes its usage row.
            there.charge(key, 3_000_000)
            await second.add_usage([spent_row(1, time.time(), key, 3_000_000)])

            for _ in range(100):
                if here.check(key) is not None:
                    break
                await asyncio.sleep(0.02)
            assert here.check(key).message == "the org Acme has spent its 3.00 for today"
        finally:
            await here.stop()
    finally:
        await first.close()
        await second.close()


async def test_budgets_taken_away_are_forgotten_at_the_next_catch_up(store):
    key = await principal(store)
    await set_limits(store, "key", key.key.id, budget_micros=1)
    key = await principal(store)
    budgets = Budgets(store)
    await budgets.restore(NOW)
    budgets.charge(key, 5, NOW)

    await store.put_limits(Limits("key", key.key.id))
    await budgets.catch_up(NOW)

    assert budgets.spent("key", key.key.id, "month", NOW) == 0
    assert await store.list_budgets() == []


async def test_a_key_without_budgets_is_never_refused_and_costs_no_counter(store):
    key = await principal(store)
    budgets = Budgets(store)
    budgets.charge(key, 10**12, NOW)
    assert budgets.check(key, NOW) is None
    await budgets.settle()


async def test_workers_sharing_spend_hold_a_budget_between_them_and_catch_up_counts_none_twice(store):
    key = await principal(store)
    await set_limits(store, "team", key.path.team.id, budget_micros=1_000_000, period="month")
    key = await principal(store)
    a, b = Budgets(store, share=True), Budgets(store, share=True)
    await a.restore(NOW)
    await b.restore(NOW)
    a.charge(key, 600_000, NOW)
    b.charge(key, 300_000, NOW)

    b.merge(a.snapshot(), NOW)
    a.merge(b.snapshot(), NOW)

    assert a.spent("team", key.path.team.id, "month", NOW) == 900_000
    assert b.spent("team", key.path.team.id, "month", NOW) == 900_000
    assert a.snapshot() == [] and b.snapshot() == []  # merged spend is never sent on as one's own
    # Both workers' rows reach the store; catching up raises to the store's
    # figure rather than adding it, so the 900 000 are counted once.
    await store.add_usage([spent_row(1, NOW - 1, key, 600_000), spent_row(2, NOW - 1, key, 300_000)])
    await a.catch_up(NOW)
    assert a.spent("team", key.path.team.id, "month", NOW) == 900_000
    b.charge(key, 100_000, NOW)
    a.merge(b.snapshot(), NOW)
    assert a.check(key, NOW).message == "the team Acme/ml has spent its 1.00 for this month"


async def test_spend_shared_from_a_period_that_is_over_is_not_put_into_the_new_one(store):
    key = await principal(store)
    await set_limits(store, "key", key.key.id, budget_micros=5_000_000, period="day")
    key = await principal(store)
    worker = Budgets(store, share=True)
    await worker.restore(NOW)
    yesterday = period_start("day", NOW - 86_400)

    worker.merge([["key", key.key.id, "day", yesterday, 4_000_000],
                  ["key", key.key.id, "day", period_start("day", NOW), 1_000]], NOW)

    assert worker.spent("key", key.key.id, "day", NOW) == 1_000


async def test_budgets_that_do_not_share_keep_no_record_to_send(store):
    key = await principal(store)
    await set_limits(store, "key", key.key.id, budget_micros=5_000_000)
    key = await principal(store)
    budgets = Budgets(store)
    budgets.charge(key, 10, NOW)
    assert budgets.snapshot() == []


async def test_the_share_of_each_budget_spent_is_there_for_prometheus_once_a_request_met_it(store):
    key = await principal(store)
    await set_limits(store, "team", key.path.team.id, budget_micros=20_000_000, period="month")
    await set_limits(store, "key", key.key.id, budget_micros=4_000_000, period="day")
    key = await principal(store)
    budgets = Budgets(store)
    await budgets.restore(NOW)
    assert budgets.spent_ratios(NOW) == []

    assert budgets.check(key, NOW) is None
    budgets.charge(key, 3_000_000, NOW)

    assert sorted(budgets.spent_ratios(NOW)) == sorted([("team", key.path.team.id, "month", 0.15),
                                                        ("key", key.key.id, "day", 0.75)])
    # A new day starts the key's day afresh; the team's month goes on.
    tomorrow = NOW + 86_400
    assert dict(((s, p), r) for s, _, p, r in budgets.spent_ratios(tomorrow)) == {("team", "month"): 0.15,
                                                                                   ("key", "day"): 0.0}
async def test_a_budget_at_80_and_100_percent_is_told_once_per_level_and_period(store):
    from llmgw.events import Events

    key = await principal(store)
    await set_limits(store, "team", key.path.team.id, budget_micros=10_000_000, period="month")
    await set_limits(store, "key", key.key.id, budget_micros=100_000_000, period="day")
    key = await principal(store)
    events = Events()
    told = []
    events.subscribe(told.append)
    budgets = Budgets(store, events=events)
    await budgets.restore(NOW)

    budgets.charge(key, 7_999_999, NOW)
    assert told == []
    budgets.charge(key, 1, NOW)  # the team's 80 %, to the micro
    budgets.charge(key, 1_000_000, NOW)
    budgets.charge(key, 1_500_000, NOW)  # past 100 %
    budgets.charge(key, 1_000_000, NOW)

    assert [(e.kind, e.fields["level"], e.fields["percent"]) for e in told] == [
        ("budget_80", "team", 80), ("budget_100", "team", 100)]
    eighty, full = told
    assert eighty.fields["level_id"] == key.path.team.id and eighty.fields["level_name"] == "the team Acme/ml"
    # Named by its org and team, so the team's own webhooks are sent it (docs/webhooks.md).
    assert (eighty.fields["org_id"], eighty.fields["team_id"]) == (key.path.org.id, key.path.team.id)
    assert eighty.fields["period"] == "month" and eighty.fields["period_start"] == utc(2026, 3, 1)
    assert eighty.fields["budget"] == "10.00" and eighty.fields["spent"] == "8.00"
    assert full.fields["spent"] == "10.50"
    # The key that carries the period in its `once`: a webhook keeps one delivery for it, cluster-wide.
    assert eighty.once == f"budget_80:team:{key.path.team.id}:month:{utc(2026, 3, 1):.0f}"

    # The next month, the same team crosses again and is told again.
    april = utc(2026, 4, 2)
    budgets.charge(key, 10_000_000, april)
    assert [(e.kind, e.fields["period_start"]) for e in told[2:]] == [("budget_100", utc(2026, 4, 1))]
