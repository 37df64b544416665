"""Usage rows to the store in batches, off the hot path.

A request's row is appended to a buffer (`submit`, which never awaits); a
background task writes the buffer in batches of up to `batch` rows, one
transaction each, every `interval` seconds or as soon as a batch is full.
One transaction per row would cap a SQLite store near a few thousand
requests a second and put a PostgreSQL round trip on every request.
A batch is at most 100 rows, not more: SQLite writes it on a thread of
this process, on the core that answers requests, and a request that
arrives meanwhile waits for the core. Measured with the gateway on one
core: 500 rows took 1.3-2.9 ms, 100 rows 0.4-0.8 ms (2.6-5.7 against
3.9-8.2 µs a row), and at concurrency 1 one request in 60-80 arrived
while a write was under way: the 99th percentile is made of those.

When the store is away (a restart, a failover) the rows wait and the batch
is tried again with a growing pause (0.5 s doubling to 10 s); one warning
says the store is away and one line says it is back, however many batches
failed between. `add_usage` skips a row id it already holds, so a batch
whose commit was not seen can safely be sent again.

Memory is bounded by `max_pending` rows (about 1 KB each: a million is a
gigabyte). When the rows waiting reach 80% of it, one warning says so, while
there is still time to bring the store back; /metrics shows the rows waiting
(`llmgw_usage_writer_pending`) beside the bound (`_max_pending`). Past it,
the oldest waiting rows are dropped and counted (`dropped`), with an error
in the log: a gateway that keeps answering with a gap in its records beats
one that runs out of memory and stops answering.

`stop()` (on SIGTERM) writes everything it can before its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from itertools import islice

from llmgw.store import StoreError, Usage, UsageStore
from llmgw.tasks import event_within

log = logging.getLogger("llmgw.accounting")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
# One error line a minute while rows are being dropped, not one per row.
DROP_LOG_EVERY = 60.0
# The share of max_pending at which the log warns that rows will soon be dropped.
NEAR_FULL = 0.8


class UsageWriter:
    def __init__(self, store: UsageStore, *, batch: int = 100, interval: float = 0.5,
                 max_pending: int = 1_000_000) -> None:
        if batch < 1 or max_pending < batch:
            raise ValueError("batch must be at least 1 and max_pending at least batch")
        self.store = store
        self.batch = batch
        self.interval = interval
        self.max_pending = max_pending
        # (sequence number, monotonic time submitted, row), oldest first.
        self._rows: deque[tuple[int, float, Usage]] = deque()
        self._next_seq = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._away_since: float | None = None
        self._tries = 0  # failed writes in this outage
        self._last_drop_log = 0.0
        self._dropped_unlogged = 0
        self._near_full = max(1, int(max_pending * NEAR_FULL))
        self._said_near_full = False  # said once until the rows fall below the mark again
        # Figures for /metrics and for tests.
        self.batches = 0
        self.written = 0
        self.dropped = 0
        self.failures = 0

    # the hot path

    def submit(self, row: Usage) -> None:
        """Queue one row. Never awaits and never touches the store."""
        if len(self._rows) >= self.max_pending:
            self._rows.popleft()
            self.dropped += 1
            self._dropped_unlogged += 1
            now = time.monotonic()
            if now - self._last_drop_log >= DROP_LOG_EVERY:
                log.error("%d usage rows dropped: %d are waiting for the store, the most kept "
                          "(max_pending); those requests were answered but will be missing "
                          "from usage and from budgets restored later",
                          self._dropped_unlogged, len(self._rows))
                self._last_drop_log, self._dropped_unlogged = now, 0
        self._rows.append((self._next_seq, time.monotonic(), row))
        self._next_seq += 1
        waiting = len(self._rows)
        if waiting >= self.batch:
            self._wake.set()
        if waiting >= self._near_full and not self._said_near_full:
            self._said_near_full = True
            log.warning("%d usage rows are waiting for the store, %d%% of the most kept (max_pending %d); "
                        "past that the oldest are dropped: bring the store back", waiting,
                        waiting * 100 // self.max_pending, self.max_pending)

    def pending(self) -> int:
        """Rows submitted and not yet written."""
        return len(self._rows)

    def lag(self) -> float:
        """Seconds since the oldest unwritten row was submitted; 0 when none waits."""
        if not self._rows:
            return 0.0
        return max(0.0, time.monotonic() - self._rows[0][1])

    # the background task

    def start(self) -> asyncio.Task[None]:
        """Start the writer, once; the task that writes."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-writer")
        return self._task

    async def stop(self, deadline: float = 10.0) -> int:
        """Write what is waiting, for at most `deadline` seconds; return how
        many rows that wrote. What is left unwritten is `pending()` after,
        and said in the log."""
        before = self.written
        self._stopping = True
        self._wake.set()
        task = self.start()
        try:
            await asyncio.wait_for(asyncio.shield(task), deadline)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        left = len(self._rows)
        if left:
            log.error("%d usage rows could not be written before stopping (the store: %s); "
                      "those requests are missing from usage", left,
                      "away" if self._away_since is not None else "too slow")
        self._task = None
        return self.written - before

    async def flush(self) -> None:
        """Write everything submitted so far (retrying while the store is away)."""
        target = self._next_seq
        while self._rows and self._rows[0][0] < target:
            if not await self._write_one():
                await asyncio.sleep(self._backoff())

    async def _run(self) -> None:
        while True:
            if not self._rows:
                if self._stopping:
                    return
                self._wake.clear()
                await event_within(self._wake, self.interval)
                continue
            if len(self._rows) < self.batch and not self._stopping:
                # Let a partial batch fill for up to `interval` from its oldest row.
                wait = self.interval - self.lag()
                if wait > 0:
                    self._wake.clear()
                    await event_within(self._wake, wait)
                    continue
            if not await self._write_one():
                pause = self._backoff()
                # A stop() does not cut the pause short: the store is away,
                # and trying faster would not bring it back.
                await asyncio.sleep(pause)

    async def _write_one(self) -> bool:
        """Write the oldest batch; False when the store refused it."""
        taken = list(islice(self._rows, self.batch))
        if not taken:
            return True
        try:
            await self.store.add_usage([row for _, _, row in taken])
        except Exception as e:  # the writer must outlive any one failure
            # Not the store being away: a bug. Said once with where it
            # happened; the rows are kept and tried again like any other.
            if not isinstance(e, StoreError) and self._away_since is None:
                log.exception("writing usage rows failed unexpectedly")
            self.failures += 1
            self._tries += 1
            if self._away_since is None:
                self._away_since = time.monotonic()
                log.warning("usage rows cannot be written (%s); keeping them (%d waiting) and "
                            "trying again", e, len(self._rows))
            return False
        if self._away_since is not None:
            log.info("usage rows are being written again after %.0f s; %d were waiting",
                     time.monotonic() - self._away_since, len(self._rows))
            self._away_since = None
        self._tries = 0
        # Rows dropped (max_pending) while the batch was being written are
        # already gone from the front; remove only what this batch covered.
        last = taken[-1][0]
        rows = self._rows
        while rows and rows[0][0] <= last:
            rows.popleft()
        self.batches += 1
        self.written += len(taken)
        if len(rows) < self._near_full:
            self._said_near_full = False
        return True

    def _backoff(self) -> float:
        # Doubling from the first failure of this outage, capped.
        return min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** max(0, min(self._tries, 16) - 1))
