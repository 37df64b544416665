"""Requests and tokens a minute, at every level of a key's chain.

Each limited level (an org, a team, a project, a key with an rpm or tpm of
its own) has a sliding minute: sixty one-second buckets and their running
total, so a check is a subtraction and a comparison whatever the traffic.
The minute slides a second at a time rather than resetting on the minute:
a fixed window lets a client send its whole minute in the last second of
one window and again in the first of the next, twice the limit in two
seconds.

Tokens are counted after the answer, when its size is known. A tpm check
therefore compares the tokens already counted in the window with the
limit: the request that crosses the limit is let through, the ones after it
are refused until the minute has room again.

Nothing here touches the store or the event loop. Memory is bounded by
the levels used in the last minute: a counter idle for a whole window is
dropped, in the order counters were last used, so the cost is spread over
requests rather than paid in one sweep.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable, Sequence

from llmgw.accounting.refusal import Refusal, level_name

if TYPE_CHECKING:
    from llmgw.account.keycache import Principal

WINDOW = 60  # seconds in the sliding minute, one bucket each

REQUESTS = "requests"
TOKENS = "tokens"


class _Window:
    """Sixty one-second buckets ending at second `last`, and their sum."""

    __slots__ = ("counts", "last", "total")

    def __init__(self, second: int) -> None:
        self.counts = [0] * WINDOW
        self.last = second
        self.total = 0

    def advance(self, second: int) -> None:
        """Slide the window to end at `second`, emptying the buckets that fall out.

        A clock that steps back leaves the window where it is: the counts
        then land in the newest bucket, which is never less strict.
        """
        if second <= self.last:
            return
        if second - self.last >= WINDOW:
            if self.total:
                self.counts = [0] * WINDOW
                self.total = 0
        else:
            counts = self.counts
            for s in range(self.last + 1, second + 1):
                i = s % WINDOW
                self.total -= counts[i]
                counts[i] = 0
        self.last = second

    def add(self, second: int, n: int) -> None:
        self.advance(second)
        if second <= self.last - WINDOW:
            return  # counts from before the window (a late report from another worker)
        self.counts[min(second, self.last) % WINDOW] += n
        self.total += n

    def wait(self, limit: int, now: float) -> int:
        """Whole seconds until the window holds less than `limit`."""
        excess = self.total - limit + 1
        freed = 0
        for s in range(self.last - WINDOW + 1, self.last + 1):
            freed += self.counts[s % WINDOW]
            if freed >= excess:
                return max(1, math.ceil(s + WINDOW - now))
        # A limit of 0 never has room; say a minute rather than forever.
        return WINDOW


class _Counter:
    __slots__ = ("requests", "tokens", "touched")

    def __init__(self, second: int) -> None:
        self.requests: _Window | None = None
        self.tokens: _Window | None = None
        self.touched = second

    def window(self, kind: str, second: int) -> _Window:
        w = self.requests if kind == REQUESTS else self.tokens
        if w is None:
            w = _Window(second)
            if kind == REQUESTS:
                self.requests = w
            else:
                self.tokens = w
        return w


# One shared count: (kind, scope, scope_id, second, count), plain values so
# it crosses a process or a machine as JSON.
Count = Sequence[object]


class RateLimiter:
    """Sliding-minute request and token counts per (scope, scope_id).

    `share=True` keeps, beside the counts, what this process added since the
    last `snapshot()`, for a worker that exchanges counts with others
    (router workers on one machine, control planes in active-active); the
    exchanger must then call `snapshot()` every few seconds.
    """

    def __init__(self, *, share: bool = False) -> None:
        self._counters: OrderedDict[tuple[str, str], _Counter] = OrderedDict()
        self._share = share
        self._delta: dict[tuple[str, str, str], dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self._counters)

    # the hot path

    def check(self, principal: Principal, now: float | None = None) -> Refusal | None:
        """The refusal of the level that makes the request wait longest, or None.

        Every level with a limit of its own is checked, not only the smallest
        figure: a key allowed 100 a minute under a team allowed 600 is refused
        when the team's other keys have used the 600, though it sent none.
        """
        now = time.time() if now is None else now
        second = int(now)
        worst: Refusal | None = None
        for level in principal.limits.levels:
            counter = self._counters.get((level.scope, level.scope_id))
            for kind, limit, word in ((REQUESTS, level.rpm, "requests"), (TOKENS, level.tpm, "tokens")):
                if limit is None:
                    continue
                w = None if counter is None else (counter.requests if kind == REQUESTS else counter.tokens)
                if w is not None:
                    w.advance(second)
                used = 0 if w is None else w.total
                if used < limit:
                    continue
                wait = WINDOW if w is None else w.wait(limit, now)
                if worst is None or wait > worst.retry_after:
                    worst = Refusal(
                        code="rate_limited",
                        message=f"{level_name(principal, level.scope)} allows {limit} {word} a minute",
                        scope=level.scope, scope_id=level.scope_id, retry_after=wait, status=429,
                    )
        return worst

    def admit(self, principal: Principal, now: float | None = None) -> None:
        """Count one request at every level with a requests-a-minute limit."""
        now = time.time() if now is None else now
        second = int(now)
        for level in principal.limits.levels:
            if level.rpm is not None:
                self._add(REQUESTS, level.scope, level.scope_id, second, 1, own=True)
        self._prune(second)

    def add_tokens(self, principal: Principal, tokens: int, now: float | None = None) -> None:
        """Count an answer's tokens (prompt and completion) at every level with a tpm."""
        if tokens <= 0:
            return
        now = time.time() if now is None else now
        second = int(now)
        for level in principal.limits.levels:
            if level.tpm is not None:
                self._add(TOKENS, level.scope, level.scope_id, second, int(tokens), own=True)
        self._prune(second)

    def used(self, scope: str, scope_id: str, now: float | None = None) -> tuple[int, int]:
        """(requests, tokens) counted for one level in the minute up to `now`."""
        second = int(time.time() if now is None else now)
        counter = self._counters.get((scope, scope_id))
        if counter is None:
            return 0, 0
        out = []
        for w in (counter.requests, counter.tokens):
            if w is None:
                out.append(0)
            else:
                w.advance(second)
                out.append(w.total)
        return out[0], out[1]

    # sharing counts between workers

    def snapshot(self) -> list[list]:
        """What this process counted since the last call, per level and second.

        Deltas, not totals, so that counts merged from others are never sent
        back out as this process's own, and a count is added once wherever it
        arrives.
        """
        out = [[kind, scope, scope_id, second, n]
               for (kind, scope, scope_id), seconds in self._delta.items()
               for second, n in seconds.items()]
        self._delta = {}
        return out

    def merge(self, counts: Iterable[Count], now: float | None = None) -> None:
        """Add other workers' counts (their `snapshot()`s) to this one's windows.

        A count from before this minute is dropped; one stamped ahead of this
        clock (a neighbour's clock a little fast) lands in the newest bucket.
        """
        second = int(time.time() if now is None else now)
        for kind, scope, scope_id, at, n in counts:
            if kind not in (REQUESTS, TOKENS):
                continue
            at = int(at)
            if at <= second - WINDOW:
                continue
            key = (str(scope), str(scope_id))
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = _Counter(second)
            w = counter.window(str(kind), second)
            w.advance(second)
            w.add(min(at, second), int(n))
            counter.touched = second
            self._counters.move_to_end(key)
        self._prune(second)

    def counts(self, now: float | None = None) -> list[list]:
        """Everything counted in the minute up to `now`, own and merged, in `snapshot()`'s form.

        For a worker that starts while the others have been counting: merged
        into its empty limiter, the minute goes on where it was instead of
        handing every key a fresh one from the new worker.
        """
        second = int(time.time() if now is None else now)
        out: list[list] = []
        for (scope, scope_id), counter in self._counters.items():
            for kind, w in ((REQUESTS, counter.requests), (TOKENS, counter.tokens)):
                if w is None:
                    continue
                w.advance(second)
                if not w.total:
                    continue
                for s in range(w.last - WINDOW + 1, w.last + 1):
                    n = w.counts[s % WINDOW]
                    if n:
                        out.append([kind, scope, scope_id, s, n])
        return out

    # inside

    def _add(self, kind: str, scope: str, scope_id: str, second: int, n: int, own: bool) -> None:
        key = (scope, scope_id)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = _Counter(second)
        else:
            self._counters.move_to_end(key)
        counter.window(kind, second).add(second, n)
        counter.touched = max(counter.touched, second)
        if own and self._share:
            seconds = self._delta.setdefault((kind, scope, scope_id), {})
            seconds[second] = seconds.get(second, 0) + n
            if len(seconds) > 2 * WINDOW:
                # An exchanger that stopped calling snapshot(): what is past
                # the window is no use to anyone, so it goes rather than grows.
                for old in [s for s in seconds if s <= second - WINDOW]:
                    del seconds[old]

    def _prune(self, second: int) -> None:
        # Counters are kept in the order they were last used, so the idle
        # ones are at the front: look only there, and stop at the first in use.
        counters = self._counters
        while counters:
            key, counter = next(iter(counters.items()))
            if counter.touched > second - WINDOW:
                break
            del counters[key]
