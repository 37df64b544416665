"""Requests and tokens a minute, at every level of a key's chain.

Each limited level (an org, a team, a project, a key with an rpm or tpm of
its own) has a sliding minute: a log of when it was used, oldest first, and
its running total, so a check is a subtraction and a comparison whatever
the traffic.

The minute is exact: a request counted at t counts against every minute
that holds t, and leaves the window at t + 60, not earlier. Counting by
whole seconds, as this did at first, let a second's requests all leave at
the start of the next second sixty seconds on: up to a second early, and
a client that sent 60 at 12:00:00.9 was let 60 more at 12:01:00.0, 120 in
59.1 s (issue 10). A fixed window would be worse: its whole minute in the
last second of one window and again in the first of the next.

Memory stays bounded per level: each use is an entry of its own up to
EXACT entries in the window (every rpm up to EXACT is counted to the
instant); past that, uses less than RESOLUTION after the first of the
newest entry share it, stamped with the latest of them. An entry leaves the
window when its latest use does, so sharing errs only towards refusing, by
less than RESOLUTION, and a level holds at most EXACT + WINDOW / RESOLUTION
+ 1 entries however busy it is.

Tokens are counted after the answer, when its size is known. A tpm check
therefore compares the tokens already counted in the window with the
limit: the request that crosses the limit is let through, the ones after it
are refused until the minute has room again.

Windows run on the monotonic clock, not the wall clock: a wall clock
stepped forward by a quarter of a second (a virtual machine's clock put
right after a pause) ended a minute that much early, and CI saw 65
requests admitted in 60 s. Counts that leave the process (to the other
workers, to other control planes) carry Unix time, converted as they are
sent and received, so only a count in flight across a step is off by it.

Nothing here touches the store or the event loop. A counter idle for a
whole window is dropped, in the order counters were last used, so the cost
is spread over requests rather than paid in one sweep. Worker processes of
one machine borrow their right to admit from the main process
(accounting/lending.py), so that a burst spread over them is held to the
limit too.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from llmgw.accounting.refusal import Refusal, level_name

if TYPE_CHECKING:
    from llmgw.account import Principal
    from llmgw.accounting.lending import Borrower

WINDOW = 60.0  # seconds in the sliding minute
EXACT = 256  # entries a window keeps one use each before it shares them
RESOLUTION = 0.1  # seconds: past EXACT entries, uses this close to an entry's first share it

REQUESTS = "requests"
TOKENS = "tokens"


class _Window:
    """Uses in the last WINDOW seconds, as [first, last, count] entries oldest first, and their sum."""

    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        # [first, last, count]: lists, not objects, as they change in place
        # on every request; first and last are times, count a whole number.
        self.entries: deque[list[Any]] = deque()
        self.total = 0

    def expire(self, now: float) -> None:
        """Drop what was counted WINDOW seconds or more before `now`.

        A clock that steps back drops nothing: the counts stay until the
        clock passes them again, which is never less strict.
        """
        entries = self.entries
        horizon = now - WINDOW
        while entries and entries[0][1] <= horizon:
            self.total -= entries.popleft()[2]

    def add(self, at: float, n: int) -> None:
        entries = self.entries
        self.total += n
        if entries:
            newest = entries[-1]
            if at < newest[1]:
                # Late (another worker's report, a clock stepped back): into the oldest entry that
                # leaves no sooner than `at` would, so it counts for at least its whole minute.
                i = len(entries) - 1
                while i > 0 and entries[i - 1][1] >= at:
                    i -= 1
                entries[i][2] += n
                return
            if at - newest[0] < RESOLUTION and len(entries) >= EXACT:
                newest[1] = at
                newest[2] += n
                return
        entries.append([at, at, n])

    def wait(self, limit: int, now: float) -> int:
        """Whole seconds until the window holds less than `limit`."""
        excess = self.total - limit + 1
        freed = 0
        for _first, last, n in self.entries:
            freed += n
            if freed >= excess:
                return max(1, math.ceil(float(last) + WINDOW - now))
        # A limit of 0 never has room; say a minute rather than forever.
        return int(WINDOW)

    def spans(self) -> Iterable[tuple[float, int]]:
        """(when, count) per entry, `when` the latest use it holds: what leaves the window with it."""
        for _first, last, n in self.entries:
            yield last, n


class _Counter:
    __slots__ = ("requests", "tokens", "touched")

    def __init__(self, now: float) -> None:
        self.requests: _Window | None = None
        self.tokens: _Window | None = None
        self.touched = now

    def window(self, kind: str) -> _Window:
        w = self.requests if kind == REQUESTS else self.tokens
        if w is None:
            w = _Window()
            if kind == REQUESTS:
                self.requests = w
            else:
                self.tokens = w
        return w


# One shared count: (kind, scope, scope_id, when, count), plain values so it
# crosses a process or a machine as JSON. `when` is a Unix time in seconds,
# the latest use the count holds (a whole second from an older llmgw).
# Any: as JSON brought them; merge() converts each value where it reads it.
Count = Sequence[Any]


class RateLimiter:
    """Sliding-minute request and token counts per (scope, scope_id).

    `share=True` keeps, beside the counts, what this process added since the
    last `snapshot()`, for a worker that exchanges counts with others
    (router workers on one machine, control planes in active-active); the
    exchanger must then call `snapshot()` every few seconds.

    `borrower`, set by a worker process, is asked before a request is
    counted (`claim`): the main process lends each worker its right to
    admit, so that the workers together never admit past a limit.

    `clock` gives the seconds every `now` here is in (monotonic unless
    told); `time.time` makes them Unix seconds, as the counts exchanged are.
    """

    def __init__(self, *, share: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self._counters: OrderedDict[tuple[str, str], _Counter] = OrderedDict()
        self._share = share
        self._delta: dict[tuple[str, str, str], _Window] = {}
        self.borrower: Borrower | None = None
        self.clock = clock

    def to_unix(self) -> float:
        """What to add to a moment on this limiter's clock to make it Unix time, as of now."""
        return 0.0 if self.clock is time.time else time.time() - self.clock()

    def __len__(self) -> int:
        return len(self._counters)

    # the hot path

    def check(self, principal: Principal, now: float | None = None) -> Refusal | None:
        """The refusal of the level that makes the request wait longest, or None.

        Every level with a limit of its own is checked, not only the smallest
        figure: a key allowed 100 a minute under a team allowed 600 is refused
        when the team's other keys have used the 600, though it sent none.
        """
        now = self.clock() if now is None else now
        worst: Refusal | None = None
        for level in principal.limits.levels:
            counter = self._counters.get((level.scope, level.scope_id))
            for kind, limit, word in ((REQUESTS, level.rpm, "requests"), (TOKENS, level.tpm, "tokens")):
                if limit is None:
                    continue
                w = None if counter is None else (counter.requests if kind == REQUESTS else counter.tokens)
                if w is not None:
                    w.expire(now)
                used = 0 if w is None else w.total
                if used < limit:
                    continue
                wait = int(WINDOW) if w is None else w.wait(limit, now)
                if worst is None or wait > worst.retry_after:
                    worst = refusal(principal, level.scope, level.scope_id, limit, word, wait)
        return worst

    async def claim(self, principal: Principal, now: float | None = None) -> Refusal | None:
        """Count one request, once this process may: at once alone, or with a loan from the main process.

        After a `check()` that passed. A refusal here is a worker's loan
        refused: the other workers have the rest of the minute.
        """
        if self.borrower is not None:
            refused = await self.borrower.take(principal)
            if refused is not None:
                return refused
            now = None  # stamped after the loan, never before it: the lender's sums rely on it
        self.admit(principal, now)
        return None

    def admit(self, principal: Principal, now: float | None = None) -> None:
        """Count one request at every level with a requests-a-minute limit."""
        now = self.clock() if now is None else now
        for level in principal.limits.levels:
            if level.rpm is not None:
                self._add(REQUESTS, level.scope, level.scope_id, now, 1, own=True)
        self._prune(now)

    def add_tokens(self, principal: Principal, tokens: int, now: float | None = None) -> None:
        """Count an answer's tokens (prompt and completion) at every level with a tpm."""
        if tokens <= 0:
            return
        now = self.clock() if now is None else now
        for level in principal.limits.levels:
            if level.tpm is not None:
                self._add(TOKENS, level.scope, level.scope_id, now, int(tokens), own=True)
        self._prune(now)

    def used(self, scope: str, scope_id: str, now: float | None = None) -> tuple[int, int]:
        """(requests, tokens) counted for one level in the minute up to `now`."""
        now = self.clock() if now is None else now
        counter = self._counters.get((scope, scope_id))
        if counter is None:
            return 0, 0
        out = []
        for w in (counter.requests, counter.tokens):
            if w is None:
                out.append(0)
            else:
                w.expire(now)
                out.append(w.total)
        return out[0], out[1]

    def room(self, scope: str, scope_id: str, limit: int, held: int, now: float) -> tuple[int, int]:
        """(requests one level may still take, whole seconds until it may take one if none),
        with `held` requests promised beside those counted (a lender's loans)."""
        counter = self._counters.get((scope, scope_id))
        w = None if counter is None else counter.requests
        if w is not None:
            w.expire(now)
        used = 0 if w is None else w.total
        left = limit - used - held
        if left > 0:
            return left, 0
        if w is None or limit - held <= 0:
            # What is promised alone fills the minute: loans are spent or given back within a second or so.
            return 0, 1 if limit > 0 else int(WINDOW)
        return 0, w.wait(limit - held, now)

    # sharing counts between workers

    def snapshot(self) -> list[list[Any]]:
        """What this process counted since the last call, per level and moment.

        Deltas, not totals, so that counts merged from others are never sent
        back out as this process's own, and a count is added once wherever it
        arrives.
        """
        unix = self.to_unix()
        out = [[kind, scope, scope_id, when + unix, n]
               for (kind, scope, scope_id), w in self._delta.items()
               for when, n in w.spans()]
        self._delta = {}
        return out

    def merge(self, counts: Iterable[Count], now: float | None = None) -> None:
        """Add other workers' counts (their `snapshot()`s) to this one's windows.

        A count from before this minute is dropped; one stamped ahead of this
        clock (a neighbour's clock a little fast) is counted as of now.
        """
        now = self.clock() if now is None else now
        unix = self.to_unix()
        for kind, scope, scope_id, at, n in counts:
            if kind not in (REQUESTS, TOKENS):
                continue
            at = float(at) - unix
            if at <= now - WINDOW:
                continue
            key = (str(scope), str(scope_id))
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = _Counter(now)
            w = counter.window(str(kind))
            w.expire(now)
            w.add(min(at, now), int(n))
            counter.touched = now
            self._counters.move_to_end(key)
        self._prune(now)

    def counts(self, now: float | None = None) -> list[list[Any]]:
        """Everything counted in the minute up to `now`, own and merged, in `snapshot()`'s form.

        For a worker that starts while the others have been counting: merged
        into its empty limiter, the minute goes on where it was instead of
        handing every key a fresh one from the new worker.
        """
        now = self.clock() if now is None else now
        unix = self.to_unix()
        out: list[list[Any]] = []
        for (scope, scope_id), counter in self._counters.items():
            for kind, w in ((REQUESTS, counter.requests), (TOKENS, counter.tokens)):
                if w is None:
                    continue
                w.expire(now)
                out.extend([kind, scope, scope_id, when + unix, n] for when, n in w.spans())
        return out

    # inside

    def _add(self, kind: str, scope: str, scope_id: str, now: float, n: int, own: bool) -> None:
        key = (scope, scope_id)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = _Counter(now)
        else:
            self._counters.move_to_end(key)
        w = counter.window(kind)
        w.expire(now)
        w.add(now, n)
        counter.touched = max(counter.touched, now)
        if own and self._share:
            delta = self._delta.get((kind, scope, scope_id))
            if delta is None:
                delta = self._delta[(kind, scope, scope_id)] = _Window()
            delta.add(now, n)
            # An exchanger that stopped calling snapshot(): what is past the
            # window is no use to anyone, so it goes rather than grows.
            delta.expire(now)

    def _prune(self, now: float) -> None:
        # Counters are kept in the order they were last used, so the idle
        # ones are at the front: look only there, and stop at the first in use.
        counters = self._counters
        horizon = now - WINDOW
        while counters:
            key, counter = next(iter(counters.items()))
            if counter.touched > horizon:
                break
            del counters[key]


def refusal(principal: Principal, scope: str, scope_id: str, limit: int, word: str, wait: int) -> Refusal:
    """A 429 naming the level whose minute is full, and when it will have room."""
    return Refusal(code="rate_limited", message=f"{level_name(principal, scope)} allows {limit} {word} a minute",
                   scope=scope, scope_id=scope_id, retry_after=wait, status=429)
