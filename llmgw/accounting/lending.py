"""Worker processes borrow their right to admit requests from the main process.

With `workers: 2`, sharing counts every 100 ms was not enough: a burst of
200 requests for a key with rpm 60 got 120 through in 0.22 s, 60 from each
worker, before either heard of the other (issue 10). So a request-a-minute
limit is the main process's to hand out. A worker admits a request only
with a loan for every limited level of the key's chain; the main process
lends from what the level's minute has left, less what it has already lent,
at most a share of it (LEND_SHARE of the room per worker), so no worker
takes the whole minute while the others ask too. A worker spends a loan
without asking again, so a busy key costs one round trip over the worker's
socket per loan, not per request; as the minute fills, loans shrink to one
request and near the limit every request asks.

The sums hold exactly: a worker reports what it spent with its counts
(every 100 ms, accounting/ratelimit.py snapshot()), which moves those
requests from "lent" to "counted" in the main process, and a use is stamped
after its loan arrived. At any moment counted + lent <= limit, so no minute
holds more than the limit, however the burst is spread over the workers.

What is lent and not spent is given back: a worker returns a loan it has
not drawn on for RETURN_AFTER. Until then another worker may be refused
while the minute still has room on paper: an undershoot of at most the
unspent loans, for about a second, and only near the limit. A worker that
dies loses its loans with it (the main process forgets them), and the
requests it spent in its last 100 ms are not counted: the one overshoot
left, bounded by what one worker admits in 100 ms as it is killed.

Tokens a minute are not lent: an answer's size is known only after it, so
a tpm is checked against the tokens already counted (the request that
crosses it is let through) and shared every 100 ms as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmgw.accounting.ratelimit import REQUESTS, RateLimiter, refusal
from llmgw.accounting.refusal import Refusal

if TYPE_CHECKING:
    from llmgw.account import Principal

log = logging.getLogger("llmgw.lending")

LEND_SHARE = 2  # a loan is at most 1 / (LEND_SHARE * workers) of what the minute has left
RETURN_AFTER = 1.0  # seconds a worker keeps a loan it does not draw on
ASK_TIMEOUT = 2.0  # seconds a worker waits for the main process before deciding alone

Level = tuple[str, str]  # (scope, scope_id)


class Lender:
    """The main process's side: lends from its limiter, which every worker's counts reach."""

    def __init__(self, limiter: RateLimiter, workers: int) -> None:
        self.limiter = limiter
        self.workers = max(1, workers)
        self._lent: dict[int, dict[Level, int]] = {}  # per worker, per level: lent and not yet reported spent
        self._total: dict[Level, int] = {}

    def lend(self, worker: int, wanted: list[list[Any]], now: float | None = None) -> list[list[Any]]:
        """[[scope, scope_id, lent, wait], …] for a worker's [[scope, scope_id, rpm], …].

        `wait` is the whole seconds until the level has room, when nothing is lent.
        """
        now = self.limiter.clock() if now is None else now
        out = []
        for scope, scope_id, limit in wanted:
            level = (str(scope), str(scope_id))
            room, wait = self.limiter.room(*level, int(limit), self._total.get(level, 0), now)
            lent = max(1, room // (LEND_SHARE * self.workers)) if room > 0 else 0
            if lent:
                mine = self._lent.setdefault(worker, {})
                mine[level] = mine.get(level, 0) + lent
                self._total[level] = self._total.get(level, 0) + lent
            out.append([level[0], level[1], lent, wait])
        return out

    def spent(self, worker: int, counts: list[list[Any]]) -> None:
        """A worker's reported counts (snapshot() deltas): its requests are counted now, no longer lent."""
        for kind, scope, scope_id, _when, n in counts:
            if kind == REQUESTS:
                self._settle(worker, (str(scope), str(scope_id)), int(n))

    def returned(self, worker: int, loans: list[list[Any]]) -> None:
        """[[scope, scope_id, n], …] a worker did not spend."""
        for scope, scope_id, n in loans:
            self._settle(worker, (str(scope), str(scope_id)), int(n))

    def forget(self, worker: int) -> None:
        """A worker that exited: what it had not spent goes back to the minute."""
        for level, n in self._lent.pop(worker, {}).items():
            self._take_from_total(level, n)

    def lent(self, level: Level) -> int:
        return self._total.get(level, 0)

    def _settle(self, worker: int, level: Level, n: int) -> None:
        mine = self._lent.get(worker)
        if not mine or level not in mine:
            return  # counted without a loan: a worker of one, or one that decided alone
        n = min(n, mine[level])
        mine[level] -= n
        if not mine[level]:
            del mine[level]
        self._take_from_total(level, n)

    def _take_from_total(self, level: Level, n: int) -> None:
        left = self._total.get(level, 0) - n
        if left > 0:
            self._total[level] = left
        else:
            self._total.pop(level, None)


class Borrower:
    """A worker's side: spends its loans, asks for more, gives back the ones it does not use.

    `ask` puts a question for these levels, [[scope, scope_id, rpm], …], on
    the channel to the main process; its answers come back through `answered`.
    """

    def __init__(self, ask: Callable[[list[list[Any]]], None]) -> None:
        self._ask_main = ask
        self._loans: dict[Level, list[float]] = {}  # level -> [left, when last drawn on or lent]
        # level -> (lent, wait) from the main process, or None when it did not answer
        self._asking: dict[Level, asyncio.Future[tuple[int, int] | None]] = {}
        self._said_late = False

    async def take(self, principal: Principal) -> Refusal | None:
        """Draw one request from the loans of every level with an rpm; ask for the ones that ran out."""
        levels = [(level.scope, level.scope_id, level.rpm) for level in principal.limits.levels
                  if level.rpm is not None]
        loans = self._loans
        while True:
            missing = [lv for lv in levels if loans.get(lv[:2], (0,))[0] <= 0]
            if not missing:
                now = time.monotonic()
                for scope, scope_id, _ in levels:
                    loan = loans[(scope, scope_id)]
                    loan[0] -= 1
                    loan[1] = now
                return None
            answers = await self._ask(missing)
            if answers is None:
                return None  # the main process did not answer: this worker's own check stands
            worst = None
            # One answer a level asked: _ask answers all of them or None.
            for (scope, scope_id, limit), (lent, wait) in zip(missing, answers, strict=True):
                if not lent and (worst is None or wait > worst.retry_after):
                    worst = refusal(principal, scope, scope_id, limit, "requests", max(1, wait))
            if worst is not None:
                return worst
            # Lent, but other requests of this worker may have drawn it first: look again.

    async def _ask(self, missing: list[tuple[str, str, int]]) -> list[tuple[int, int]] | None:
        """(lent, wait) per missing level; one question in flight per level, however many requests wait."""
        loop = asyncio.get_running_loop()
        ask: list[list[Any]] = []
        for scope, scope_id, limit in missing:
            if (scope, scope_id) not in self._asking:
                self._asking[(scope, scope_id)] = loop.create_future()
                ask.append([scope, scope_id, limit])
        if ask:
            self._ask_main(ask)
        futures = [asyncio.shield(self._asking[(scope, scope_id)]) for scope, scope_id, _ in missing]
        try:
            answers = await asyncio.wait_for(asyncio.gather(*futures), ASK_TIMEOUT)
        except TimeoutError:
            if not self._said_late:
                log.warning("the main process did not lend within %.0f s; this worker decides rate limits "
                            "alone until it does", ASK_TIMEOUT)
                self._said_late = True
            for scope, scope_id, _ in missing:
                self._unanswered((scope, scope_id))
            return None
        got = [a for a in answers if a is not None]
        return got if len(got) == len(answers) else None

    def answered(self, levels: list[list[Any]]) -> None:
        """The main process's answer to a "borrow": [[scope, scope_id, lent, wait], …]."""
        self._said_late = False
        for scope, scope_id, lent, wait in levels:
            self._settle((str(scope), str(scope_id)), int(lent), int(wait))

    def _settle(self, level: Level, lent: int, wait: int) -> None:
        if lent:
            loan = self._loans.setdefault(level, [0, 0.0])
            loan[0] += lent
            loan[1] = time.monotonic()
        future = self._asking.pop(level, None)
        if future is not None and not future.done():
            future.set_result((lent, wait))

    def idle(self, now: float | None = None) -> list[list[Any]]:
        """Loans not drawn on for RETURN_AFTER, taken back from this worker: [[scope, scope_id, n], …]."""
        now = time.monotonic() if now is None else now
        out = []
        for level in [lv for lv, (left, last) in self._loans.items() if now - last >= RETURN_AFTER]:
            left = self._loans.pop(level)[0]
            if left > 0:
                out.append([level[0], level[1], left])
        return out

    def close(self) -> None:
        """The main process went away: nobody to ask, every request waiting decides alone."""
        for level in list(self._asking):
            self._unanswered(level)

    def _unanswered(self, level: Level) -> None:
        future = self._asking.pop(level, None)
        if future is not None and not future.done():
            future.set_result(None)
