"""Admission: when every replica of a model is full, requests wait their turn by band.

Without it a burst is sent on regardless and every engine's queue grows,
so everyone's first token comes later, people at a chat window included.
With it the excess waits here, where the order can be chosen: a higher
band's priority first, and first come first served within equal priority.
A request that waits past its band's queue_ttl is refused (504 with
Retry-After), since a client that can wait would rather be told when to
come back than be held on an open connection.

Whether a model is full is the proxy's to say, through the `full` callback
given to enter(): every local replica at `saturation` requests in flight.
Outside providers never count as full (their own 429 is the signal, and
their breakers hear it), so a model with one is never full.

The protocol:

    ticket = await admission.enter(model, band, full)   # may raise AdmissionTimeout
    with ticket:                                         # or ticket.release() in a finally
        endpoint.in_flight += 1                          # before the next await
        ...

A ticket's release (the request to that model ended) is what wakes the
next waiter; the waiter goes in if `full()` is then False. Waiters are let
in one at a time, each after the one before has run up to its next await,
so that the proxy has counted it in flight before `full()` is asked again;
that is why the request must be counted before the proxy's next await.
"""

from __future__ import annotations

import asyncio
import math
import time
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

from llmgw.config import AdmissionSettings

# Retry-After is worked out from how fast requests to the model have been
# ending over this long, and kept between these bounds: a client told
# "600" by a stuck model gives up on a model that may be back in ten.
RATE_WINDOW = 60.0
RETRY_MIN = 1
RETRY_MAX = 60


class AdmissionTimeout(Exception):
    """A request waited as long as its band allows; the proxy answers 504 with Retry-After."""

    def __init__(self, model: str, band: str, retry_after: int, waited: float) -> None:
        self.model = model
        self.band = band
        self.retry_after = retry_after
        self.waited = waited
        super().__init__(
            f"every replica of {model} is busy and this request waited {waited:.0f} s, "
            f"as long as its band ({band}) allows; try again in {retry_after} s")


@dataclass(eq=False)
class _Waiter:
    priority: int
    seq: int
    band: str
    full: Callable[[], bool]
    future: asyncio.Future
    since: float
    timer: asyncio.TimerHandle | None = None

    @property
    def order(self) -> tuple[int, int]:
        return (-self.priority, self.seq)


@dataclass(eq=False)
class _Queue:
    waiters: list[_Waiter] = field(default_factory=list)  # sorted by order
    drain_pending: bool = False


@dataclass(eq=False)
class _EndRate:
    """How fast a model's requests end: this window's count and the last's.

    Two counters rather than a timestamp per request: a model ending two
    thousand requests a second would otherwise hold 120,000 of them.
    """

    start: float
    current: int = 0
    previous: int = 0
    born: float = -1.0

    def __post_init__(self) -> None:
        self.born = self.start

    def add(self, now: float) -> None:
        self._roll(now)
        self.current += 1

    def per_second(self, now: float) -> float:
        self._roll(now)
        # The sliding-window estimate: the last window's count, weighted by
        # how much of it still lies within RATE_WINDOW of now.
        into = (now - self.start) / RATE_WINDOW
        # Over less than a window while the model is new to this process.
        span = min(RATE_WINDOW, max(1.0, now - self.born))
        return (self.previous * (1.0 - into) + self.current) / span

    def _roll(self, now: float) -> None:
        windows = int((now - self.start) // RATE_WINDOW)
        if windows >= 1:
            self.previous = self.current if windows == 1 else 0
            self.current = 0
            self.start += windows * RATE_WINDOW


class Ticket:
    """A request let in; releasing it (once) tells admission that room may have come free."""

    __slots__ = ("_admission", "model", "band", "waited", "_released")

    def __init__(self, admission: Admission, model: str, band: str, waited: float) -> None:
        self._admission = admission
        self.model = model
        self.band = band
        self.waited = waited
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission.release(self.model)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Ticket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class Admission:
    def __init__(self, settings: AdmissionSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._queues: dict[str, _Queue] = {}
        self._ended: dict[str, _EndRate] = {}
        self._seq = count()
        self.configure(settings)

    def configure(self, settings: AdmissionSettings) -> None:
        """New settings, live. Waiters take their band's new priority; their deadlines stay as set."""
        self.settings = settings
        self._bands = {b.name: b for b in settings.bands}
        for model, queue in self._queues.items():
            for waiter in queue.waiters:
                waiter.priority = self._band(waiter.band)[1]
            queue.waiters.sort(key=lambda w: w.order)
            self._kick(model)

    @property
    def saturation(self) -> int:
        """Requests in flight on one replica at which it counts as full (0: admission off); for `full()`."""
        return self.settings.saturation

    def _band(self, name: str | None) -> tuple[str, int, float]:
        """The band's name, priority and queue TTL; an unknown name is the default band."""
        band = self._bands.get(name or "") or self._bands.get(self.settings.default_band)
        if band is None:
            return (self.settings.default_band, 0, float(self.settings.queue_ttl))
        return (band.name, band.priority, float(band.queue_ttl or self.settings.queue_ttl))

    def waiting(self, model: str) -> dict[str, int]:
        """How many requests wait for the model, by band (every configured band, 0s included)."""
        counts = {b.name: 0 for b in self.settings.bands}
        queue = self._queues.get(model)
        for waiter in queue.waiters if queue else ():
            counts[waiter.band] = counts.get(waiter.band, 0) + 1
        return counts

    async def enter(self, model: str, band: str | None, full: Callable[[], bool]) -> Ticket:
        """Let a request to `model` in now, or once there is room and its turn has come."""
        name, priority, ttl = self._band(band)
        if not self.settings.saturation:
            return Ticket(self, model, name, 0.0)
        queue = self._queues.get(model)
        ahead = queue is not None and queue.waiters and queue.waiters[0].priority >= priority
        if not ahead and not full():
            return Ticket(self, model, name, 0.0)
        if queue is None:
            queue = self._queues[model] = _Queue()
        loop = asyncio.get_running_loop()
        waiter = _Waiter(priority, next(self._seq), name, full, loop.create_future(), self._clock())
        insort(queue.waiters, waiter, key=lambda w: w.order)
        waiter.timer = loop.call_later(max(0.0, ttl), self._expire, model, waiter)
        # Room may have come without a release (a replica added, saturation
        # raised); a newcomer that queues is the moment to look again.
        self._kick(model)
        try:
            await waiter.future
        except asyncio.CancelledError:
            self._leave(model, waiter)
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                # Let in just as its client went away: the room is the next waiter's.
                self._kick(model)
            raise
        finally:
            waiter.timer.cancel()
        return Ticket(self, model, name, self._clock() - waiter.since)

    def release(self, model: str) -> None:
        """A request to `model` ended: the next waiter may go in, if there is room now."""
        now = self._clock()
        rate = self._ended.get(model)
        if rate is None:
            rate = self._ended[model] = _EndRate(now)
        rate.add(now)
        self._kick(model)

    def _kick(self, model: str) -> None:
        queue = self._queues.get(model)
        if queue is None or queue.drain_pending or not queue.waiters:
            return
        queue.drain_pending = True
        # call_soon, not now: a waiter just let in runs (and is counted in
        # flight by the proxy) before the next is weighed against full().
        # The waiters' loop, not get_running_loop(): configure() may be called from synchronous code.
        queue.waiters[0].future.get_loop().call_soon(self._drain, model)

    def _drain(self, model: str) -> None:
        queue = self._queues.get(model)
        if queue is None:
            return
        queue.drain_pending = False
        while queue.waiters and queue.waiters[0].future.done():
            queue.waiters.pop(0)  # cancelled: enter()'s handler is on its way
        if not queue.waiters:
            self._forget_if_idle(model, queue)
            return
        head = queue.waiters[0]
        if self.settings.saturation and head.full():
            return
        queue.waiters.pop(0)
        head.future.set_result(True)
        if queue.waiters:
            self._kick(model)
        else:
            self._forget_if_idle(model, queue)

    def _expire(self, model: str, waiter: _Waiter) -> None:
        if waiter.future.done():
            return
        queue = self._queues.get(model)
        ahead = 0
        if queue is not None:
            ahead = sum(1 for w in queue.waiters if w.order < waiter.order)
        waited = self._clock() - waiter.since
        self._leave(model, waiter)
        waiter.future.set_exception(
            AdmissionTimeout(model, waiter.band, self.retry_after(model, ahead), waited))

    def retry_after(self, model: str, ahead: int = 0) -> int:
        """About when a request with `ahead` others before it would get its turn, in whole seconds.

        Its place in the queue over the rate the model's requests have been
        ending at; with nothing ended lately to measure by, the longest we give.
        """
        rate = self._ended.get(model)
        per_second = rate.per_second(self._clock()) if rate is not None else 0.0
        seconds = (ahead + 1) / per_second if per_second > 0 else RETRY_MAX
        return int(min(RETRY_MAX, max(RETRY_MIN, math.ceil(seconds))))

    def _leave(self, model: str, waiter: _Waiter) -> None:
        queue = self._queues.get(model)
        if queue is None:
            return
        try:
            queue.waiters.remove(waiter)
        except ValueError:
            pass
        self._forget_if_idle(model, queue)

    def _forget_if_idle(self, model: str, queue: _Queue) -> None:
        if not queue.waiters and not queue.drain_pending:
            self._queues.pop(model, None)
