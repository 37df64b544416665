"""Money a level may spend in a day or a month, counted in memory.

Each budget of a key's chain (an org's monthly 1000.00, a key's daily 5.00)
is one counter per (scope, scope_id, period), holding the spend since the
period began. Periods are UTC days and months: every control plane of a
cluster, wherever it is, turns the page at the same instant.

The store is the record; memory is what the hot path reads:

- `restore()` at start reads each budget's spend this period from the
  usage rows, so a restart does not hand everyone a fresh month.
- `catch_up()` every 30 s raises each counter to the store's figure. On
  several control planes, the others' spend reaches this one only through
  the store. It never lowers a counter: this process's own spend is in
  memory before its usage rows are written, and a store that is behind
  must not wipe it.
- With `share=True` (router workers on one machine) each worker's charges
  also reach the others through `snapshot()` and `merge()`, every 100 ms,
  instead of at the next catch-up. That cannot count a charge twice against
  catch-up's figure: catch-up raises a counter to the store's figure, it
  never adds the two, and the store's figure is what every worker charged
  once its rows are written. A counter is then max(store, what this worker
  saw), and what it saw is at most the machine's charges (each once, its
  own from `charge`, the others' from `merge`) on top of the figure it last
  took from the store. The one overlap is a charge whose usage row reaches
  the store before its share reaches a worker, in the same moment as that
  worker's catch-up (or its start): it is counted twice there, which errs
  towards refusing, by at most what one sharing interval spent.
- A budget this process has no counter for (set a moment ago, or on a
  level not seen since start) is counted from 0 at once and its spend read
  from the store in the background; the read raises the counter when it
  lands, milliseconds later. The request that met it is not held for the
  read: the hot path never waits on the store.

A charge that carries a budget past 80 % or 100 % of its sum emits
`budget_80` or `budget_100` on the events bus (llmgw/events.py), once per
level and period: the event's `once` key is the level and the period's
start, so the webhooks keep one delivery for it however many control planes
or processes see the crossing. Spend learned from the store (catch-up, a
restart's restore) crosses nothing: the process whose charge crossed said so.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from llmgw.account import format_money
from llmgw.accounting.refusal import Refusal, level_name
from llmgw.store import KeysStore, StoreError, UsageStore

if TYPE_CHECKING:
    from llmgw.account import Budget, Principal
    from llmgw.events import Events

log = logging.getLogger("llmgw.accounting")

CATCH_UP_INTERVAL = 30.0

_UTC = dt.UTC


def period_start(period: str, now: float) -> float:
    """When the UTC day or month holding `now` began, in epoch seconds."""
    at = dt.datetime.fromtimestamp(now, _UTC)
    if period == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start.timestamp()


def period_end(period: str, now: float) -> float:
    """When the UTC day or month holding `now` ends (the next one's start)."""
    start = dt.datetime.fromtimestamp(period_start(period, now), _UTC)
    if period == "day":
        end = start + dt.timedelta(days=1)
    elif start.month == 12:
        end = start.replace(year=start.year + 1, month=1)
    else:
        end = start.replace(month=start.month + 1)
    return end.timestamp()


class _Spend:
    __slots__ = ("start", "micros")

    def __init__(self, start: float, micros: int = 0) -> None:
        self.start = start
        self.micros = micros


Counter = tuple[str, str, str]  # scope, scope_id, period


class _Store(KeysStore, UsageStore, Protocol):
    """What Budgets reads: the levels that have a budget, and each one's spend."""


class Budgets:
    def __init__(self, store: _Store, *, interval: float = CATCH_UP_INTERVAL, share: bool = False,
                 events: Events | None = None) -> None:
        self.store = store
        self._events = events
        self.interval = interval
        self._share = share
        # What this process charged since the last snapshot(), by counter and period start.
        self._delta: dict[tuple[str, str, str, float], int] = {}
        self._spend: dict[Counter, _Spend] = {}
        # Each budget's amount as the last request under it said, for the spent ratio Prometheus reads.
        self._amounts: dict[Counter, int] = {}
        self._reads: dict[Counter, asyncio.Task[None]] = {}
        self._unread: set[Counter] = set()
        self._task: asyncio.Task[None] | None = None
        self._store_away = False

    # the hot path

    def check(self, principal: Principal, now: float | None = None) -> Refusal | None:
        """The refusal of a spent budget on the key's chain, or None.

        Of several spent budgets, the one that comes back last is named (a
        spent month outlasts a spent day): waiting out the other would only
        meet this one.
        """
        now = time.time() if now is None else now
        worst: Refusal | None = None
        for budget in principal.limits.budgets:
            counter = (budget.scope, budget.scope_id, budget.period)
            self._amounts[counter] = budget.micros
            spend = self._counter(counter, now)
            if spend.micros < budget.micros:
                continue
            wait = max(1, math.ceil(period_end(budget.period, now) - now))
            if worst is None or wait > worst.retry_after:
                when = "today" if budget.period == "day" else "this month"
                worst = Refusal(
                    code="budget_exceeded",
                    message=(f"{level_name(principal, budget.scope)} has spent its "
                             f"{format_money(budget.micros)} for {when}"),
                    scope=budget.scope, scope_id=budget.scope_id, retry_after=wait, status=402,
                )
        return worst

    def charge(self, principal: Principal, cost_micros: int, now: float | None = None) -> None:
        """Add a request's cost to every budget of its key's chain."""
        if cost_micros <= 0:
            return
        now = time.time() if now is None else now
        for budget in principal.limits.budgets:
            spend = self._counter((budget.scope, budget.scope_id, budget.period), now)
            before = spend.micros
            spend.micros += cost_micros
            if self._events is not None and budget.micros > 0:
                self._tell_crossing(principal, budget, spend.start, before, spend.micros)
            if self._share:
                key = (budget.scope, budget.scope_id, budget.period, spend.start)
                self._delta[key] = self._delta.get(key, 0) + cost_micros

    def spent(self, scope: str, scope_id: str, period: str, now: float | None = None) -> int:
        """This period's spend on one budget as this process knows it."""
        now = time.time() if now is None else now
        spend = self._spend.get((scope, scope_id, period))
        if spend is None or spend.start != period_start(period, now):
            return 0
        return spend.micros

    def spent_ratios(self, now: float | None = None) -> list[tuple[str, str, str, float]]:
        """(scope, scope_id, period, this period's spend / the budget) for each budget a request met here."""
        now = time.time() if now is None else now
        return [(scope, scope_id, period, self.spent(scope, scope_id, period, now) / amount if amount else 0.0)
                for (scope, scope_id, period), amount in list(self._amounts.items())]
    def _tell_crossing(self, principal: Principal, budget: Budget, start: float, before: int, after: int) -> None:
        """A budget's 80 % or 100 % crossed, told once a period; named by its org and team (for the tenants'
        webhooks), an org's budget by its org alone: a team's administrator is not told of the level above."""
        assert self._events is not None
        for percent in (100, 80):
            line = budget.micros * percent // 100
            if before < line <= after:
                kind = f"budget_{percent}"
                # The period's start in the subject too: the hourly dedupe must not hold back the next
                # day's crossing, minutes after midnight.
                subject = f"{budget.scope}:{budget.scope_id}:{budget.period}:{start:.0f}"
                self._events.emit(
                    kind, subject=subject, once=f"{kind}:{subject}",
                    level=budget.scope, level_id=budget.scope_id, level_name=level_name(principal, budget.scope),
                    period=budget.period, period_start=start, budget=format_money(budget.micros),
                    spent=format_money(after), percent=percent, **_places(principal, budget.scope))
                return  # one charge past both lines says 100 %, not 80 % too

    # sharing spend between workers

    def snapshot(self) -> list[list[Any]]:
        """What this process charged since the last call: [scope, scope_id, period, period_start, micros].

        Deltas, like RateLimiter.snapshot(): a worker's merged spend is never
        sent on as its own, so each charge is added once wherever it lands.
        """
        out = [[scope, scope_id, period, start, micros]
               for (scope, scope_id, period, start), micros in self._delta.items()]
        self._delta = {}
        return out

    def merge(self, spends: Iterable[Sequence[Any]], now: float | None = None) -> None:
        """Add other workers' charges (their `snapshot()`s) to this one's counters.

        A charge of a period that is over here (sent at 23:59:59.95, arriving
        after midnight) is dropped rather than put into the new day.
        """
        now = time.time() if now is None else now
        for scope, scope_id, period, start, micros in spends:
            if period not in ("day", "month"):
                continue
            spend = self._counter((str(scope), str(scope_id), str(period)), now)
            if spend.start == float(start):
                spend.micros += int(micros)

    # the store

    async def restore(self, now: float | None = None) -> int:
        """At start: every budget's spend this period, from the usage rows.

        Returns how many budgets were read. Raises StoreError: a control plane
        that cannot read its budgets should say so rather than start counting
        everyone from zero.
        """
        count = await self.catch_up(now)
        log.info("restored %d budgets from the store", count)
        return count

    async def catch_up(self, now: float | None = None) -> int:
        """Raise each budget's counter to the store's figure; never lower one.

        Budgets no longer set anywhere are dropped, so memory follows the
        limits rather than everything ever budgeted.
        """
        now = time.time() if now is None else now
        rows = await self.store.list_budgets()
        present: set[Counter] = set()
        for row in rows:
            counter = (row.scope, row.scope_id, row.period or "month")
            present.add(counter)
            await self._read(counter, now)
        self._unread -= present
        for counter in list(self._unread):
            # A budget a cached key's chain still carries though its row is
            # gone: still counted, from the store, until the chain is re-read.
            await self._read(counter, now)
            self._unread.discard(counter)
            present.add(counter)
        for counter in [c for c in self._spend if c not in present and c not in self._reads]:
            del self._spend[counter]
        return len(rows)

    async def settle(self) -> None:
        """Wait for the background reads of budgets met for the first time."""
        while self._reads:
            await asyncio.gather(*list(self._reads.values()), return_exceptions=True)

    def start(self) -> None:
        """Catch up every `interval` seconds until stop()."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="budgets-catch-up")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._reads.values()) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._reads.clear()

    # inside

    def _counter(self, counter: Counter, now: float) -> _Spend:
        start = period_start(counter[2], now)
        spend = self._spend.get(counter)
        if spend is None:
            spend = self._spend[counter] = _Spend(start)
            self._read_soon(counter, now)
        elif spend.start < start:
            # A new day or month: nothing spent in it yet, here. Another
            # control plane's spend in it arrives with the next catch-up.
            spend.start, spend.micros = start, 0
        return spend

    def _read_soon(self, counter: Counter, now: float) -> None:
        if counter in self._reads:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._unread.add(counter)  # no loop to read on: the next catch-up reads it
            return
        task = loop.create_task(self._read_first(counter, now), name="budget-read")
        self._reads[counter] = task
        task.add_done_callback(lambda _t: self._reads.pop(counter, None))

    async def _read_first(self, counter: Counter, now: float) -> None:
        try:
            await self._read(counter, now)
        except StoreError as e:
            self._unread.add(counter)
            log.warning("could not read the spend of the %s %s's budget (%s); counting from what "
                        "this control plane sees until the next catch-up", counter[0], counter[1], e)

    async def _read(self, counter: Counter, now: float) -> None:
        scope, scope_id, period = counter
        start = period_start(period, now)
        stored = await self.store.spend_since(scope, scope_id, start)
        spend = self._spend.get(counter)
        if spend is None:
            self._spend[counter] = _Spend(start, stored)
        elif spend.start < start:
            spend.start, spend.micros = start, stored
        elif spend.start == start and stored > spend.micros:
            spend.micros = stored

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.catch_up()
            except StoreError as e:
                if not self._store_away:
                    log.warning("budgets cannot catch up with the store (%s); counting on from "
                                "memory and trying every %g s", e, self.interval)
                self._store_away = True
                continue
            except Exception:  # the loop must outlive one bad round
                log.exception("budgets' catch-up failed")
                continue
            if self._store_away:
                log.info("budgets caught up with the store again")
            self._store_away = False


def _places(principal: Principal, level: str) -> dict[str, str]:
    path = principal.path
    return {"org_id": path.org.id} if level == "org" else {"org_id": path.org.id, "team_id": path.team.id}
