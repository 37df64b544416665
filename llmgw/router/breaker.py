"""A circuit breaker for one replica or one provider key: pass over what keeps failing.

closed     requests go through; `failures` failures in a row open it, when
           they are the engine's (below).
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

Whose failure it is. One client can make an engine answer 500 to its own
requests (a prompt that trips an engine bug), or time out (a huge prompt);
if that opened the breaker, one key holder could take a model away from
everyone. So a failure says who asked:

    failure(reason)            the engine could not be reached at all
                               (connection refused, no connection in time):
                               nothing about the request can cause that, so
                               it always counts.
    failure(reason, asker)     an answer that failed (a 5xx, a timeout, a
                               connection dropped after the request was
                               sent): it counts toward opening only when the
                               failures in a row came from `distinct_keys`
                               different askers (API keys). When the count is
                               reached with fewer, failure() returns True:
                               the caller asks the replica itself (probe.py)
                               and trip()s it if that fails too.

An engine's 4xx and 501 are the request's own refusal and never reach here.

A trial that never reports (a bug, a task killed without its finally) would
keep the replica out for ever; so a trial outstanding for longer than
`open_for` is taken as lost and another may be let through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]


class Breaker:
    def __init__(self, failures: int = 5, open_for: float = 30.0, distinct_keys: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.failures = max(1, int(failures))
        self.open_for = float(open_for)
        self.distinct_keys = max(1, int(distinct_keys))
        self.last_reason: str | None = None
        self._in_a_row = 0
        # Of the failures in a row: whether any was the engine's whoever asked, and who asked the others.
        self._unreachable = False
        self._askers: set[str] = set()
        self._opened_at: float | None = None  # None: closed
        self._trial_at: float | None = None  # when the half-open trial was let through
        # Told when this breaker opens by what it saw itself, with the reason: worker processes
        # pass it to their siblings, whose breakers for the same replica open too (`trip(quiet=True)`).
        self.on_open: Callable[[str], None] | None = None

    def configure(self, failures: int, open_for: float, distinct_keys: int = 2) -> None:
        """New settings, taken live: an open breaker's period is measured with the new open_for."""
        self.failures = max(1, int(failures))
        self.open_for = float(open_for)
        self.distinct_keys = max(1, int(distinct_keys))

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at < self.open_for:
            return "open"
        return "half_open"

    def retry_in(self) -> float:
        """Seconds until a request may be let through again: 0 when one may go now.

        Open: until the period ends. Half-open with the trial out: until the
        trial lapses at the latest, though it usually answers far sooner.
        """
        # One reading of the clock for the whole answer: asking `state` again after available() could find
        # the open period ended in between, with no trial out to measure from.
        now = self._clock()
        if self._opened_at is None:
            return 0.0  # closed
        if now - self._opened_at < self.open_for:
            return self._opened_at + self.open_for - now  # open
        if self._trial_at is not None and now - self._trial_at < self.open_for:
            return self._trial_at + self.open_for - now  # half-open with the trial out
        return 0.0  # half-open, the trial free to take

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
        self._forget_run()
        if self.state != "open":
            # Closed stays closed; in half-open the trial (or a request sent
            # before the breaker opened, which is as good a witness) worked.
            self._opened_at = None
            self._trial_at = None
        # While open, a late success from a request sent before the trip
        # does not close it: the failures that tripped it came after.

    def failure(self, reason: str, asker: str | None = None) -> bool:
        """A request allow() let through failed. `asker`: None when the engine could not be
        reached at all; else who asked (an API key's id) for an answer that failed.

        Returns True when the count is reached but by too few askers to open on its own:
        then, and again every `failures` failures after while it stays so, the caller should
        ask the replica itself and trip() the breaker if that fails too.
        """
        self.last_reason = reason
        state = self.state
        if state == "half_open":
            # The trial is the one request let through to see whether the replica recovered;
            # a trial that fails says it has not, whoever asked.
            self._open(reason)
            return False
        if state == "open":
            # Failures of requests already on their way change nothing: it is passed over
            # already, and extending the period for each would keep a recovered replica out longer.
            return False
        self._in_a_row += 1
        if asker is None:
            self._unreachable = True
        else:
            self._askers.add(asker)
        if self._in_a_row < self.failures:
            return False
        if self._unreachable or len(self._askers) >= self.distinct_keys:
            self._open(reason)
            return False
        return (self._in_a_row - self.failures) % self.failures == 0

    def trip(self, reason: str, *, quiet: bool = False) -> None:
        """Open at once, whatever the count: a provider key answering 429 (at its limit) or
        401 (refused) will say the same to the next request, so it is passed over now; so is
        a replica whose own health check failed after its requests did.
        `quiet`: opened because another process's breaker did; nobody else is told."""
        self.last_reason = reason
        self._open(None if quiet else reason)

    def abandon(self) -> None:
        """A request allow() let through ended with no verdict; give back the trial if it held it."""
        if self.state == "half_open":
            self._trial_at = None

    def _forget_run(self) -> None:
        self._in_a_row = 0
        self._unreachable = False
        self._askers.clear()

    def _open(self, tell: str | None) -> None:
        self._opened_at = self._clock()
        self._trial_at = None
        self._forget_run()
        if tell is not None and self.on_open is not None:
            self.on_open(tell)

    def __repr__(self) -> str:
        return f"Breaker({self.state}, last_reason={self.last_reason!r})"
