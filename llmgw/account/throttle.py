"""The unknown-key throttle: a client trying many wrong keys is slowed, and nobody else.

Counted per client address (llmgw/router/clientaddr.py, which believes a
trusted proxy's X-Forwarded-For), and consulted only for a key that failed:
a valid key is answered whatever its address has tried, because behind a
shared address (a NAT, a proxy not listed in `router.trusted_proxies`) one
guesser would otherwise lock out every key holder there (issue 10).

A throttled address still costs the store something for a key memory does
not know (it could be a colleague's valid one), so those lookups go one at
a time for that address: a flood of made-up keys waits in its own line,
bounded by the per-address connection cap, while keys memory knows and
other addresses pass it by.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

WINDOW = 60.0  # seconds an address's count of unknown keys runs over


class UnknownKeyThrottle:
    """Counts unknown keys per client address in a one-minute window."""

    MAX_ADDRESSES = 50_000

    def __init__(self, per_minute: Callable[[], int]):
        self._rate = per_minute
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lines: dict[str, tuple[asyncio.Lock, int]] = {}  # throttled address -> its lookups' line, users

    def throttled(self, address: str, now: float | None = None) -> float:
        """Seconds the address must wait, 0 when it may try."""
        now = time.monotonic() if now is None else now
        start, count = self._windows.get(address, (now, 0))
        if now - start >= WINDOW:
            return 0.0
        return max(0.0, WINDOW - (now - start)) if count >= self._rate() else 0.0

    def failed(self, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        start, count = self._windows.get(address, (now, 0))
        if now - start >= WINDOW:
            start, count = now, 0
        self._windows[address] = (start, count + 1)
        self._windows.move_to_end(address)
        while len(self._windows) > self.MAX_ADDRESSES:
            self._windows.popitem(last=False)

    @contextlib.asynccontextmanager
    async def in_line(self, address: str) -> AsyncIterator[None]:
        """One store lookup at a time for this (throttled) address."""
        lock, users = self._lines.get(address) or (asyncio.Lock(), 0)
        self._lines[address] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._lines[address]
            if users <= 1:
                del self._lines[address]  # nobody waits: no lock kept per address ever seen
            else:
                self._lines[address] = (lock, users - 1)

    def waiting(self, address: str) -> int:
        """Lookups of this address in its line, the one under way included."""
        entry = self._lines.get(address)
        return entry[1] if entry else 0
