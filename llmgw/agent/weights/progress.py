"""A download's progress, told to every shard waiting on it, not too often.

A 100 GB download read in 1 MiB chunks is a hundred thousand updates;
each becomes a ShardStatus on the leader's WebSocket if nothing holds them
back. So progress goes out at most every `interval` seconds, with the first
report of each phase and the last at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from llmgw.protocol import FetchProgress

log = logging.getLogger("llmgw.agent.weights")

ProgressCallback = Callable[[FetchProgress], object]

CHECKING = "checking"


class Broadcast:
    """The progress of one fetch, for each of the callbacks of those waiting on it."""

    def __init__(self, source: str, interval: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self.source = source
        self.interval = interval
        self._clock = clock
        self._callbacks: list[ProgressCallback] = []
        self.last: FetchProgress | None = None
        self._last_at = 0.0

    def add(self, callback: ProgressCallback) -> None:
        """Listen from now on; told at once where the fetch has got to, joining late."""
        self._callbacks.append(callback)
        if self.last is not None:
            self._call(callback, self.last)

    def discard(self, callback: ProgressCallback) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def update(self, done: int, total: int, phase: str = "", *, force: bool = False) -> None:
        now = self._clock()
        if not force and self.last is not None and self.last.phase == phase and now - self._last_at < self.interval:
            return
        self.last = FetchProgress(source=self.source, bytes_done=done, bytes_total=total, phase=phase)
        self._last_at = now
        for callback in list(self._callbacks):
            self._call(callback, self.last)

    @staticmethod
    def _call(callback: ProgressCallback, progress: FetchProgress) -> None:
        # A listener that fails must not fail the download the others wait on.
        try:
            callback(progress)
        except Exception:
            log.exception("a fetch progress listener failed")
