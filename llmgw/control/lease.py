"""Leadership: one lease row in the store, held by whichever control plane renews it.

The leader renews every third of the TTL. A standby tries on the same beat
and takes the lease only once it has lapsed, so a SIGKILLed leader is
replaced within TTL + one round (10 s + 3.3 s by default, under the 15 s
that operators are promised).

Two rules keep two leaders from ever overlapping:
- a leader that cannot reach the store stops calling itself leader before
  its lease could have lapsed in the store (its own clock, monotonic, from
  the moment it sent the last successful renewal);
- a standby that lost the store leaves the lease alone for one round after
  the store answers again, so it sees a fresh renewal from a leader that
  was cut off from it only, instead of reading a stale expiry and grabbing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmgw.store import Lease, LeaseStore, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.lease")

LEADER = "leader"


@dataclass
class LeaseState:
    leading: bool
    lease: Lease | None
    store_ok: bool
    since: float  # monotonic time of the last change of `leading`


class LeaseKeeper:
    def __init__(self, store: LeaseStore, holder: str, address: str, ttl: Callable[[], float],
                 on_change: Callable[[bool], None] | None = None):
        self.store = store
        self.holder = holder
        self.address = address
        self._ttl = ttl
        self._on_change = on_change
        self._leading_until = 0.0  # monotonic deadline of our own lease
        self._skip_round = False
        self.state = LeaseState(False, None, True, time.monotonic())
        self._task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    @property
    def leading(self) -> bool:
        return self.state.leading and time.monotonic() < self._leading_until

    @property
    def cut_off(self) -> bool:
        """Stepped down (or about to) only because the store is away, the lease last seen its own.

        Such a control plane stops placing work, but keeps answering /v1
        itself: no other control plane can be seen leading, and passing /v1
        on to nobody would refuse every client for as long as the store
        fails over (a Patroni failover: seconds to its ttl). It is a
        standby again as soon as the store shows another holder.
        """
        lease = self.state.lease
        return not self.state.store_ok and lease is not None and lease.holder == self.holder

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lease")

    async def stop(self, release: bool = True) -> None:
        self._stopped.set()
        await cancel_and_wait(self._task)
        if release and self.state.leading:
            try:
                await self.store.release_lease(LEADER, self.holder)
                log.info("gave up the lease so a standby can lead at once")
            except StoreError:
                pass
        self._set_leading(False)

    async def reclaim(self) -> None:
        """Take the lease back at once from this control plane's own previous run, which is gone.

        A restarted server is a new holder, and would wait out the TTL its
        dead predecessor left: 10 s in which nobody leads (issue 9 measured a
        restarted leader's catalog unanswered for 10.8 s). The predecessor is
        known to be gone: its holder names this control plane at this same
        address, and this process holds that address's ports, which a live
        predecessor would still have. Released, the lease is taken by the
        next round as any lapsed lease is, so a standby racing for it is
        as welcome to it.
        """
        try:
            lease = await self.store.get_lease(LEADER)
            if (lease is None or lease.holder == self.holder or lease.expires_at <= time.time()
                    or lease.holder.rsplit("#", 1)[0] != self.holder.rsplit("#", 1)[0]
                    or lease.address != self.address):
                return
            await self.store.release_lease(LEADER, lease.holder)
        except StoreError:
            return  # the first round says what is wrong with the store
        log.info("took back the lease from this control plane's previous run (%s), which is gone", lease.holder)

    async def _run(self) -> None:
        while not self._stopped.is_set():
            await self.round()
            ttl = self._ttl()
            try:
                await asyncio.wait_for(self._stopped.wait(), timeout=ttl / 3)
            except TimeoutError:
                pass

    async def round(self) -> None:
        """One attempt: renew, take a lapsed lease, or watch."""
        ttl = self._ttl()
        sent = time.monotonic()
        try:
            if self._skip_round:
                lease = await self.store.get_lease(LEADER)
                self._skip_round = False
                if lease is not None and lease.holder == self.holder:
                    lease = await self.store.try_lease(LEADER, self.holder, self.address, ttl)
            else:
                lease = await self.store.try_lease(LEADER, self.holder, self.address, ttl)
        except StoreError as e:
            if self.state.store_ok:
                log.warning("lost the store: %s", e)
            self.state.store_ok = False
            self._skip_round = True
            # Keep leading only while our last renewal still holds in the store.
            if self.state.leading and time.monotonic() >= self._leading_until:
                log.warning("stepping down: the lease could not be renewed before it lapsed")
                self._set_leading(False)
            return
        if not self.state.store_ok:
            log.info("the store answers again")
        self.state.store_ok = True
        self.state.lease = lease
        mine = lease is not None and lease.holder == self.holder
        if mine:
            # A margin of a tenth: our clock and the store's may tick at
            # slightly different rates over one TTL.
            self._leading_until = sent + ttl * 0.9
        self._set_leading(mine)

    def _set_leading(self, leading: bool) -> None:
        if leading == self.state.leading:
            return
        self.state.leading = leading
        self.state.since = time.monotonic()
        log.info("this control plane %s", "leads" if leading else "stands by")
        if self._on_change:
            self._on_change(leading)
