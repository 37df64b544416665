"""What requests ask of the catalog's models, for the leader's placement: per process, in memory.

Placement loads an on-demand model when a request waits for it, and lets
one give way only once it has been idle long enough. Neither is in the
store: it is what this router's requests say, read by the reconciler each
pass (`read()`) and handed to `place()` as its Demand.

An ask lasts while a request waits for the model, and is dropped once a
replica is ready; when every request waiting for it has left (timed out,
gone) it is kept ASK_LINGER more seconds, so a client that retries finds the
load still under way rather than started again from nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ASK_LINGER = 30.0


class DemandRecord:
    def __init__(self, clock: Callable[[], float] = time.time, linger: float = ASK_LINGER) -> None:
        self._clock = clock
        self._linger = linger
        self.last_used: dict[str, float] = {}  # catalog model -> when a request last named it
        self._asked: dict[str, float] = {}  # on-demand model -> since when a request has waited for it
        self._waiting: dict[str, int] = {}  # model -> requests waiting for it now
        self._left: dict[str, float] = {}  # model -> when its last waiting request left

    def used(self, model: str) -> None:
        """A request named `model` (at its start, and again at its end: a long answer is not idleness)."""
        self.last_used[model] = self._clock()

    @contextmanager
    def asking(self, model: str) -> Iterator[None]:
        """A request waits for `model` to have a replica, for as long as the block runs."""
        now = self._clock()
        self._asked.setdefault(model, now)
        self._waiting[model] = self._waiting.get(model, 0) + 1
        self._left.pop(model, None)
        try:
            yield
        finally:
            left = self._waiting.get(model, 1) - 1
            if left > 0:
                self._waiting[model] = left
            else:
                self._waiting.pop(model, None)
                if model in self._asked:
                    self._left[model] = self._clock()

    def loaded(self, model: str) -> None:
        """`model` has a replica ready: nothing is asked of placement for it any more."""
        self._asked.pop(model, None)
        self._left.pop(model, None)

    def read(self) -> tuple[dict[str, float], dict[str, float]]:
        """(asked, last_used) as placement's Demand takes them; asks nobody has waited on for a while are dropped."""
        now = self._clock()
        for model, left in list(self._left.items()):
            if now - left > self._linger:
                del self._left[model]
                self._asked.pop(model, None)
        return dict(self._asked), dict(self.last_used)

    def waiting(self, model: str) -> int:
        return self._waiting.get(model, 0)
