"""A circuit breaker for one replica or one provider key: pass over what keeps failing.

closed     requests go through; `failures` failures in a row open it.
open       passed over for `open_for` seconds.
half_open  then exactly one request (the trial) is let through: its success
           closes the breaker, its failure opens it for `open_for` again.

The protocol the proxy follows, and why it has two ways to ask:

    available()   may this endpoint be offered? Consumes nothing. The
                  scheduler asks this of every candidate, because it ranks
                  many and sends to one.
    allow()       may a request go now? In half-open this hands out the one
                  trial, so only the proxy asks it, of the endpoint it is
                  about to send to (scheduler.take does).
    success() / failure(reason)
                  the verdict on a request that allow() let through.
    abandon()     the request ended with no verdict (the client went away
                  before the engine answered): the trial, if it was one, is
                  handed back so the next request can be the trial instead.

A trial that never reports (a bug, a task killed without its finally) would
keep the replica out for ever; so a trial outstanding for longer than
`open_for` is taken as lost and another may be let through.
"""

from __future__ import annotations

import time
from typing import Callable, Literal

State = Literal["closed", "open", "half_open"]


class Breaker:
    def __init__(self, failures: int = 5, open_for: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.failures = max(1, int(failures))
        self.open_for = float(open_for)
        self.last_reason: str | None = None
        self._in_a_row = 0
        self._opened_at: float | None = None  # None: closed
        self._trial_at: float | None = None  # when the half-open trial was let through
        # Told when this breaker opens by what it saw itself, with the reason: worker processes
        # pass it to their siblings, whose breakers for the same replica open too (`trip(quiet=True)`).
        self.on_open: Callable[[str], None] | None = None

    def configure(self, failures: int, open_for: float) -> None:
        """New settings, taken live: an open breaker's period is measured with the new open_for."""
        self.failures = max(1, int(failures))
        self.open_for = float(open_for)

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at < self.open_for:
            return "open"
        return "half_open"

    def _trial_out(self, now: float) -> bool:
        return self._trial_at is not None and now - self._trial_at < self.open_for

    def available(self) -> bool:
        """Whether allow() would say yes now, without taking the trial."""
        state = self.state
        if state == "closed":
            return True
        return state == "half_open" and not self._trial_out(self._clock())

    def allow(self) -> bool:
        """Whether a request may go now; in half-open, True hands out the single trial."""
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        now = self._clock()
        if self._trial_out(now):
            return False
        self._trial_at = now
        return True

    def success(self) -> None:
        self._in_a_row = 0
        if self.state != "open":
            # Closed stays closed; in half-open the trial (or a request sent
            # before the breaker opened, which is as good a witness) worked.
            self._opened_at = None
            self._trial_at = None
        # While open, a late success from a request sent before the trip
        # does not close it: the failures that tripped it came after.

    def failure(self, reason: str) -> None:
        self.last_reason = reason
        state = self.state
        if state == "closed":
            self._in_a_row += 1
            if self._in_a_row >= self.failures:
                self._open(reason)
        elif state == "half_open":
            self._open(reason)
        # While open, failures of requests already on their way change
        # nothing: it is passed over already, and extending the period for
        # each would keep a recovered replica out longer.

    def trip(self, reason: str, *, quiet: bool = False) -> None:
        """Open at once, whatever the count: a provider key answering 429 (at its limit) or
        401 (refused) will say the same to the next request, so it is passed over now.
        `quiet`: opened because another process's breaker did; nobody else is told."""
        self.last_reason = reason
        self._open(None if quiet else reason)

    def abandon(self) -> None:
        """A request allow() let through ended with no verdict; give back the trial if it held it."""
        if self.state == "half_open":
            self._trial_at = None

    def _open(self, tell: str | None) -> None:
        self._opened_at = self._clock()
        self._trial_at = None
        self._in_a_row = 0
        if tell is not None and self.on_open is not None:
            self.on_open(tell)

    def __repr__(self) -> str:
        return f"Breaker({self.state}, last_reason={self.last_reason!r})"
