"""Active-active: standbys that answer `/v1` themselves, and the round that keeps them in step with the leader.

With `router.active_active`, every 2 s each standby posts to the leader's
agent port, with its control-plane certificate:

- the rate-limit counts its routers added since its last round (deltas, as
  the worker processes exchange them: a count is added once wherever it
  arrives, and never sent back out as the receiver's own);
- what its requests ask of placement: on-demand models waited for, and when
  each model was last used (else the leader would evict a replica busy
  behind a standby as idle).

The leader merges the counts into its own routers and answers with
everyone else's since the standby's last round (its own and the other
standbys'), the whole minute on a standby's first round, and the catalog's
ready replicas as its reconciler last saw them. No key travels: each control
plane derives the engines' key from the master key.

A round that fails keeps its counts for the next. A standby that has not
heard from the leader for UNHEARD_AFTER stops answering `/v1` itself and
passes it on (router/passon.py), or answers 503 while nobody leads; the
leader forgets a standby quiet for QUIET_AFTER. Each control plane alone
holds a key to its limit (its own workers by loans, accounting/lending.py);
a key spread over N control planes may pass it by what the others let
through before they hear of each other: up to two rounds, 4 s, of its
traffic through them, and at most the limit on each.

Budgets are not exchanged: every router raises its spend to the store's
every 30 s (accounting/budgets.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from llmgw.accounting import RESOLUTION
from llmgw.connecterror import connect_failure
from llmgw.control.routes import from_doc, to_doc
from llmgw.trust import peer_control_plane

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane
    from llmgw.router import Router

log = logging.getLogger("llmgw.exchange")

ACTIVITY_PATH = "/routing/activity"
EVERY = 2.0  # seconds between a standby's rounds
ROUND_TIMEOUT = 3.0
UNHEARD_AFTER = 60.0  # a standby unheard from the leader this long passes /v1 on instead of answering
QUIET_AFTER = 10.0  # the leader stops counting for a standby quiet this long
UNSENT_MAX = 200_000  # counts kept for the next round while the leader does not answer
BODY_MAX = 64 * 2**20
TENTHS = round(1 / RESOLUTION)  # a waiting count's moment is kept to this fraction of a second


class Counts(Protocol):
    """This control plane's routers' counts: the in-process router's, or its workers' (control/workers/)."""

    def take(self) -> list[list[Any]]:
        """What they counted since the last take."""

    def whole(self) -> list[list[Any]]:
        """Everything counted in the minute, own and merged."""

    def absorb(self, rate: list[list[Any]]) -> None:
        """Add other control planes' counts."""

    def asks(self) -> tuple[dict[str, float], dict[str, float]]:
        """(asked, last_used), as placement's Demand takes them."""


@dataclass
class _Peer:
    heard: float
    pending: list[list[Any]] = field(default_factory=list)  # others' counts not yet sent to it
    asked: dict[str, float] = field(default_factory=dict)
    last_used: dict[str, float] = field(default_factory=dict)


class Exchange:
    def __init__(self, plane: ControlPlane, counts: Counts) -> None:
        self.plane = plane
        self.counts = counts
        self.peers: dict[str, _Peer] = {}  # on the leader: standbys by name
        self.heard: float | None = None  # on a standby: monotonic time of the leader's last answer
        self._unsent: list[list[Any]] = []
        self._said: str | None = None  # the last failure logged, so a down leader is one line
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.plane.settings.current.router.active_active)

    def fresh(self) -> bool:
        """A standby that answers /v1 itself: on, and it heard from the leader within UNHEARD_AFTER."""
        return self.enabled and self.heard is not None and time.monotonic() - self.heard < UNHEARD_AFTER

    # the leader's side

    def mount(self, app: web.Application) -> None:
        app.router.add_post(ACTIVITY_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        name = peer_control_plane(request)
        if name is None:
            return _error(403, "only a control plane of this cluster takes part in the routing exchange",
                          "control_plane_only")
        if not self.plane.lease.leading:
            return _error(409, "this control plane does not lead; ask the leader", "not_leader")
        try:
            # Past aiohttp's 1 MiB default: a busy minute of many keys' counts is larger, and only a
            # control plane with the cluster's certificate gets this far.
            raw = await request.content.read(BODY_MAX + 1)
            if len(raw) > BODY_MAX:
                return _error(413, f"a round's counts are limited to {BODY_MAX // 2**20} MiB", "too_large")
            body = orjson.loads(raw)
            rate = list(body.get("rate") or [])
            asked = {str(k): float(v) for k, v in (body.get("asked") or {}).items()}
            used = {str(k): float(v) for k, v in (body.get("last_used") or {}).items()}
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return _error(400, "the routing exchange takes a JSON object with rate, asked and last_used",
                          "invalid_request")
        self._share_own()
        now = time.monotonic()
        peer = self.peers.get(name)
        if peer is None:
            log.info("control plane %s answers /v1 beside this leader (active-active)", name)
            peer = self.peers[name] = _Peer(now, pending=self.counts.whole())
        peer.heard, peer.asked, peer.last_used = now, asked, used
        if rate:
            self.counts.absorb(rate)
            for other_name, other in self.peers.items():
                if other_name != name:
                    other.pending = summed(other.pending, rate)
        reply = {"rate": peer.pending, "routes": to_doc(self.plane.routes.current)}
        peer.pending = []
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    def _share_own(self) -> None:
        """The leader's own new counts, queued for every standby; standbys gone quiet are forgotten."""
        own = self.counts.take()
        now = time.monotonic()
        for name in [n for n, p in self.peers.items() if now - p.heard > QUIET_AFTER]:
            log.info("control plane %s has not taken part in the routing exchange for %.0f s; "
                     "its counts are no longer kept", name, QUIET_AFTER)
            del self.peers[name]
        if own:
            for peer in self.peers.values():
                peer.pending = summed(peer.pending, own)

    def asks(self) -> tuple[dict[str, float], dict[str, float]]:
        """The standbys' demand, for the leader's placement."""
        return merged_asks((p.asked, p.last_used) for p in self.peers.values())

    # the loop: the leader shares its own counts; a standby takes part in a round

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="routing-exchange")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(EVERY)
            try:
                if self.plane.lease.leading:
                    self.heard = None
                    self._share_own()
                elif self.enabled:
                    await self.round()
                else:
                    self.heard = None
                    self.counts.take()  # nobody to tell: what is taken is kept from growing
            except Exception:  # the exchange must outlive one bad round
                log.exception("a routing exchange round failed")

    async def round(self) -> bool:
        """One round with the leader; whether it answered."""
        self.peers.clear()
        address = self.plane.cluster.leader_address()
        self._unsent = summed(self._unsent, self.counts.take())
        if len(self._unsent) > UNSENT_MAX:
            # Oldest first: what is older than the minute counts for nothing anyway.
            del self._unsent[:len(self._unsent) - UNSENT_MAX]
        if not address:
            self._failed("no control plane leads now")
            return False
        context = self.client_context()
        if context is None:
            self._failed(f"this control plane cannot prove itself to the leader: {self.plane.trust.problem}")
            return False
        asked, used = self.counts.asks()
        body = orjson.dumps({"rate": self._unsent, "asked": asked, "last_used": used})
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ROUND_TIMEOUT))
        try:
            async with self._session.post(f"https://{address}{ACTIVITY_PATH}", data=body, ssl=context,
                                          headers={"Content-Type": "application/json"}) as r:
                reply = orjson.loads(await r.read()) if r.content_type == "application/json" else {}
                if r.status != 200:
                    message = (reply.get("error") or {}).get("message") or f"HTTP {r.status}"
                    self._failed(f"the leader at {address} answered: {message}")
                    return False
        except aiohttp.ClientConnectorError as e:
            self._failed(f"the leader at {address} did not answer: {connect_failure(e)}")
            return False
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            self._failed(f"the leader at {address} did not answer ({type(e).__name__}: {e})")
            return False
        self._unsent = []
        began = not self.fresh()
        self._said = None
        self.heard = time.monotonic()
        if began:
            if self.plane.workers:
                self.plane.workers.lease_changed()  # the workers answer from now, not half a second later
            log.info("following the leader at %s: this control plane answers /v1 itself", address)
        self.counts.absorb(list(reply.get("rate") or []))
        self.plane.routes.publish(from_doc(reply.get("routes") or {}, self.plane.trust.engine_key or None))
        return True

    def _failed(self, why: str) -> None:
        if why != self._said:
            after = "" if self.fresh() else "; /v1 is passed on to the leader meanwhile"
            log.warning("routing exchange: %s%s", why, after)
            self._said = why

    def client_context(self) -> ssl.SSLContext | None:
        return self.plane.trust.client_context()


def merged_asks(sources: Iterable[tuple[Mapping[str, float], Mapping[str, float]]]
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Several routers' (asked, last_used) as one: the earliest ask of a model, its latest use."""
    asked: dict[str, float] = {}
    used: dict[str, float] = {}
    for their_asked, their_used in sources:
        for model, since in their_asked.items():
            asked[model] = min(float(since), asked.get(model, float(since)))
        for model, at in their_used.items():
            used[model] = max(float(at), used.get(model, float(at)))
    return asked, used


def summed(counts: list[list[Any]], more: list[list[Any]]) -> list[list[Any]]:
    """Two lists of counts as one, a (kind, scope, id, tenth of a second) once: rounds that failed, or
    several standbys' counts waiting for another, grow with the keys in use and not with the time waited.

    A count's moment is rounded up to its tenth, never down: rounded down it would leave the other
    control planes' windows before its minute was over (accounting/ratelimit.py)."""
    if not counts:
        return list(more)
    total: dict[tuple[Any, Any, Any, float], int] = {}
    for kind, scope, scope_id, when, n in (*counts, *more):
        key = (kind, scope, scope_id, math.ceil(float(when) * TENTHS) / TENTHS)
        total[key] = total.get(key, 0) + int(n)
    return [[*key, n] for key, n in total.items()]


def _error(status: int, message: str, code: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": {"message": message, "code": code}}),
                        content_type="application/json")


class RouterCounts:
    """Counts of the in-process router (a control plane without workers)."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def take(self) -> list[list[Any]]:
        return self.router.limits.snapshot()

    def whole(self) -> list[list[Any]]:
        return self.router.limits.counts()

    def absorb(self, rate: list[list[Any]]) -> None:
        self.router.limits.merge(rate)

    def asks(self) -> tuple[dict[str, float], dict[str, float]]:
        return self.router.demand.read()
