"""Usage rows: batched off the hot path, kept while the store is away, flushed on stop."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from llmgw.accounting import UsageWriter
from llmgw.store import StoreUnavailable, Usage, open_store
from tests.support.pgcluster import PgCluster


def row(n: int, cost: int = 1) -> Usage:
    return Usage(id=f"req_{n:06d}", at=1_800_000_000.0 + n / 1000, key_id="key_a", project_id="prj_a",
                 model="llama", prompt_tokens=10, completion_tokens=5, cost_micros=cost)


async def landed(store) -> int:
    summary = await store.usage_summary(since=0.0, by="model")
    return sum(g["requests"] for g in summary)


async def wait_written(writer: UsageWriter, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while writer.pending() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def own_cluster():
    """A cluster of this module's own, since the outage test stops and starts it."""
    try:
        cluster = PgCluster()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    yield cluster
    cluster.destroy()


async def test_ten_thousand_rows_submitted_at_once_all_land_in_a_few_dozen_transactions(store):
    writer = UsageWriter(store, batch=500, interval=0.05)
    writer.start()
    try:
        for n in range(10_000):
            writer.submit(row(n))
        await wait_written(writer)
    finally:
        await writer.stop()

    assert writer.pending() == 0
    assert await landed(store) == 10_000
    assert await store.spend_since("key", "key_a", since=0.0) == 10_000
    assert writer.batches <= 25  # 10,000 / 500 = 20, and a partial one or two
    assert writer.written == 10_000 and writer.dropped == 0


async def test_submitting_never_waits_and_rows_are_written_within_the_interval(store):
    writer = UsageWriter(store, batch=500, interval=0.1)
    writer.start()
    try:
        writer.submit(row(1))
        assert writer.pending() == 1  # queued, not written, when submit returns
        await asyncio.sleep(0.05)
        assert writer.lag() >= 0.05
        await wait_written(writer, timeout=5)
        assert writer.pending() == 0 and writer.lag() == 0.0
        assert await store.usage_by_id("req_000001") == row(1)
    finally:
        await writer.stop()


async def test_stopping_writes_every_waiting_row_first(store):
    # As on SIGTERM: rows still in the buffer reach the store before the process ends.
    writer = UsageWriter(store, batch=100, interval=60)
    for n in range(1234):
        writer.submit(row(n))

    assert await writer.stop(deadline=30) == 1234

    assert writer.pending() == 0
    assert await landed(store) == 1234


async def test_past_max_pending_the_oldest_rows_are_dropped_counted_and_logged(store, caplog):
    writer = UsageWriter(store, batch=10, interval=60, max_pending=100)
    with caplog.at_level(logging.ERROR, logger="llmgw.accounting"):
        for n in range(150):
            writer.submit(row(n))

    assert writer.pending() == 100 and writer.dropped == 50
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "usage rows dropped" in errors[0].getMessage()
    assert await writer.stop() == 100
    assert await store.usage_by_id("req_000049") is None
    assert await store.usage_by_id("req_000050") is not None
    assert await landed(store) == 100


async def test_rows_submitted_while_postgresql_is_down_all_land_once_it_is_back(own_cluster, caplog):
    store = await open_store(own_cluster.create_database())
    writer = UsageWriter(store, batch=50, interval=0.05)
    writer.start()
    try:
        for n in range(100):
            writer.submit(row(n))
        await wait_written(writer)
        assert writer.pending() == 0

        with caplog.at_level(logging.INFO, logger="llmgw.accounting"):
            own_cluster.stop()
            try:
                for n in range(100, 1100):
                    writer.submit(row(n))
                # Let several batches fail against the stopped server.
                deadline = time.monotonic() + 10
                while writer.failures < 3 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                assert writer.failures >= 3
                assert writer.pending() == 1000
            finally:
                own_cluster.start()
            await wait_written(writer, timeout=60)

        assert writer.pending() == 0
        assert await landed(store) == 1100
        ours = [r for r in caplog.records if r.name == "llmgw.accounting"]
        warnings = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
        # One line for the outage, however many batches failed in it, and one when it ended.
        assert len(warnings) == 1 and "usage rows cannot be written" in warnings[0]
        assert any("being written again" in r.getMessage() for r in ours)
    finally:
        await writer.stop()
        await store.close()


async def test_stopping_while_the_store_is_away_gives_up_at_the_deadline_and_says_how_many(store_url, caplog):
    store = await open_store(store_url)
    await store.close()  # the store is gone for good
    writer = UsageWriter(store, batch=10, interval=0.05)
    writer.start()
    for n in range(25):
        writer.submit(row(n))

    with caplog.at_level(logging.ERROR, logger="llmgw.accounting"):
        # The store never comes back, so returning at all is the deadline at work; the 30 s only turns a stop
        # that ignored it into a failure that says so.
        wrote = await asyncio.wait_for(writer.stop(deadline=0.5), timeout=30)

    assert wrote == 0 and writer.pending() == 25
    assert any("25 usage rows could not be written before stopping" in r.getMessage()
               for r in caplog.records)


async def test_rows_waiting_for_a_stopped_postgresql_warn_once_near_the_bound_and_all_land_once_it_is_back(
        own_cluster, caplog):
    store = await open_store(own_cluster.create_database())
    writer = UsageWriter(store, batch=10, interval=0.05, max_pending=100)
    writer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="llmgw.accounting"):
            own_cluster.stop()
            try:
                for n in range(95):
                    writer.submit(row(n))
                    await asyncio.sleep(0)  # the writer tries, and fails, as rows come
            finally:
                own_cluster.start()
            await wait_written(writer, timeout=60)

        near = [r.getMessage() for r in caplog.records if "of the most kept" in r.getMessage()]
        assert near == ["80 usage rows are waiting for the store, 80% of the most kept (max_pending 100); "
                        "past that the oldest are dropped: bring the store back"]
        assert writer.pending() == 0 and writer.dropped == 0
        assert await landed(store) == 95
    finally:
        await writer.stop()
        await store.close()


class CommitNotSeen:
    """The real store, but the first batch's answer is lost after it was committed (a connection cut at the end)."""

    def __init__(self, store) -> None:
        self.store = store
        self.lost = 0

    async def add_usage(self, rows):
        await self.store.add_usage(rows)
        if not self.lost:
            self.lost += 1
            raise StoreUnavailable("the store at test closed the connection; is PostgreSQL running there?")


async def test_a_batch_whose_commit_was_not_seen_is_sent_again_and_counted_once(store):
    writer = UsageWriter(CommitNotSeen(store), batch=50, interval=0.05)
    writer.start()
    try:
        for n in range(120):
            writer.submit(row(n))
        await wait_written(writer)
    finally:
        await writer.stop()

    assert writer.failures == 1 and writer.pending() == 0
    assert await landed(store) == 120
    assert await store.spend_since("key", "key_a", since=0.0) == 120
