"""Events into deliveries, and deliveries to their webhooks: kept in the store, sent by the leader.

The recorder subscribes to the events bus of every process that emits (a
control plane, a router worker) and writes one delivery row per webhook the
event is for, before anything is sent: a process that stops a moment later
loses nothing. The sender runs on every control plane and sends only while
it leads: it takes the deliveries due from the store, posts each, and writes
the outcome. A 2xx is delivered; anything else (another status, no answer,
a refused address) is tried again after a wait that grows — 10 s, 30 s,
2 min, 10 min, 30 min, then every hour, scaled by `notify.retry_first` — for
`notify.give_up_after` from the event, then marked failed. A restart, or a
new leader, carries on from the rows.

A delivery is sent at least once: if the leader stops between the
webhook's 2xx and writing it down, the next sends it again, with the same
X-Llmgw-Delivery id, which is how a receiver drops the duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import replace

import aiohttp

from llmgw.config import NotifySettings
from llmgw.connecterror import connect_failure
from llmgw.events import Event
from llmgw.notify.bodies import event_doc, render
from llmgw.notify.signing import sign
from llmgw.notify.targets import sessions
from llmgw.router import TargetRefused
from llmgw.store import Delivery, StoreError, Webhook, WebhookStore
from llmgw.tasks import event_within
from llmgw.trust import FILE_NAME, MasterKey, TrustError, read_master_key

log = logging.getLogger("llmgw.notify")

# The waits between attempts, in units of notify.retry_first (10 s by default): 10 s, 30 s, 2 min,
# 10 min, 30 min, then every hour.
STEPS = (1, 3, 12, 60, 180)
THEN_EVERY = 360
MOST_AT_ONCE = 50  # deliveries sent in one round; the rest are due still and go in the next
MAX_ANSWER = 64 * 1024  # of a webhook's answer, read (and dropped) so the connection can be reused


def secret_purpose(webhook_id: str) -> str:
    # Bound into the sealed secret: one webhook's secret cannot be passed off as another's.
    return f"webhook-secret:{webhook_id}"


def backoff(attempts: int, first: float) -> float:
    """The wait after the `attempts`-th failed attempt."""
    step = STEPS[attempts - 1] if 0 < attempts <= len(STEPS) else THEN_EVERY
    return first * step


def wants(hook: Webhook, event: Event) -> bool:
    """Whether `hook` is sent `event`: of a kind it asks for, and for a tenant's webhook, about its place.

    A tenant administrator's webhook (place "org:ID" or "team:ID") is sent only events that name that place
    among their org_id and team_id: a budget, key or guardrail of theirs, never the cluster's own (a node
    lost, a leader changed), which name none."""
    if not hook.enabled or not ("*" in hook.events or event.kind in hook.events):
        return False
    if not hook.place:
        return True
    level, _, place_id = hook.place.partition(":")
    return bool(place_id) and event.fields.get(f"{level}_id") == place_id


def new_delivery_id() -> str:
    return "dl_" + secrets.token_hex(8)


class Recorder:
    """The events bus's subscriber: a delivery row per webhook the event is for, written before any send."""

    def __init__(self, store: WebhookStore, *, wake: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._wake = wake
        self._clock = clock

    async def __call__(self, event: Event) -> None:
        try:
            hooks = [h for h in await self.store.list_webhooks() if wants(h, event)]
            if not hooks:
                return
            now = self._clock()
            rows = []
            for hook in hooks:
                delivery_id = new_delivery_id()
                body = render(event_doc(event, delivery_id), hook.format).decode()
                rows.append(Delivery(delivery_id, hook.id, event.kind, body, event.once or delivery_id,
                                     next_attempt_at=now, created_at=now))
            if await self.store.add_deliveries(rows):
                self._wake()
        except StoreError as e:
            # Nothing else keeps it: said in the log, where the bus's own line already is.
            log.warning("the %s event about %s could not be kept for the webhooks: %s", event.kind,
                        event.subject or "-", e)


class Answer:
    """One attempt's outcome: the status (None when there was no answer) and a sentence when it was not taken."""

    __slots__ = ("status", "error")

    def __init__(self, status: int | None, error: str = "") -> None:
        self.status, self.error = status, error

    @property
    def taken(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Sender:
    """Posts deliveries to their webhooks: the leader's loop, and `ctl webhooks test`'s single attempt."""

    def __init__(self, store: WebhookStore, settings: Callable[[], NotifySettings], data_dir: str, *,
                 leading: Callable[[], bool], clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._settings = settings
        self._leading = leading
        self._clock = clock
        self.master_key_path = os.path.join(data_dir, FILE_NAME)
        self._key: MasterKey | None = None
        self._sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession] | None = None
        self._due = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._store_away = False

    def wake(self) -> None:
        """A delivery was just recorded: look now rather than at the next `send_every`."""
        self._due.set()

    def start(self) -> None:
        self._sessions = sessions()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="webhooks-sender")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._sessions is not None:
            for session in self._sessions:
                await session.close()
            self._sessions = None

    async def _run(self) -> None:
        while True:
            await event_within(self._due, float(self._settings().send_every))
            self._due.clear()
            if not self._leading():
                continue
            try:
                await self.send_due()
                if self._store_away:
                    log.info("the webhooks' deliveries can be read from the store again")
                self._store_away = False
            except StoreError as e:
                if not self._store_away:
                    log.warning("the webhooks' deliveries cannot be read from the store (%s); trying again", e)
                self._store_away = True
            except Exception:  # one bad round must not end the deliveries for good
                log.exception("a round of webhook deliveries failed")

    async def send_due(self) -> int:
        """Send every delivery due now; returns how many were tried."""
        due = await self.store.due_deliveries(self._clock(), MOST_AT_ONCE)
        hooks: dict[str, Webhook | None] = {}
        for d in due:
            if d.webhook_id not in hooks:
                hooks[d.webhook_id] = await self.store.webhook(d.webhook_id)
        await asyncio.gather(*(self._attempt(d, hooks[d.webhook_id]) for d in due if hooks[d.webhook_id]))
        if len(due) == MOST_AT_ONCE:
            self._due.set()
        return len(due)

    async def _attempt(self, d: Delivery, hook: Webhook | None) -> None:
        assert hook is not None
        answer = await self.post(hook, d.id, d.event_kind, d.body.encode())
        now = self._clock()
        settings = self._settings()
        attempts = d.attempts + 1
        if answer.taken:
            done = replace(d, attempts=attempts, state="delivered", last_status=answer.status, last_error="",
                           delivered_at=now)
        else:
            after = now + backoff(attempts, float(settings.retry_first))
            gave_up = after - d.created_at > float(settings.give_up_after)
            done = replace(d, attempts=attempts, state="failed" if gave_up else "pending", next_attempt_at=after,
                           last_status=answer.status, last_error=answer.error)
            (log.warning if gave_up else log.info)(
                "webhook %s did not take delivery %s (%s, attempt %d)%s", hook.id, d.id, answer.error, attempts,
                "; given up" if gave_up else f"; trying again in {after - now:.3g} s")
        try:
            await self.store.record_attempt(done)
        except StoreError as e:
            if answer.taken:
                # Sent, and not written down: the next round sends it again, with the same delivery id.
                log.warning("delivery %s was taken by webhook %s but could not be marked delivered (%s); the "
                            "receiver may see it again, with the same X-Llmgw-Delivery", d.id, hook.id, e)
            else:
                raise

    async def post(self, hook: Webhook, delivery_id: str, kind: str, body: bytes) -> Answer:
        """One attempt: POST the body, signed when the webhook has a secret."""
        timestamp = str(int(self._clock()))
        headers = {"Content-Type": "application/json", "User-Agent": "llmgw-webhooks",
                   "X-Llmgw-Event": kind, "X-Llmgw-Delivery": delivery_id, "X-Llmgw-Timestamp": timestamp}
        if hook.secret_sealed is not None:
            try:
                secret = await self._secret(hook)
            except TrustError as e:
                return Answer(None, f"its signing secret cannot be opened here: {e}")
            headers["X-Llmgw-Signature"] = sign(secret, timestamp, body)
        if self._sessions is None:
            self._sessions = sessions()
        session = self._sessions[1] if hook.allow_private else self._sessions[0]
        timeout = aiohttp.ClientTimeout(total=float(self._settings().timeout))
        try:
            async with session.post(hook.url, data=body, headers=headers, timeout=timeout,
                                    allow_redirects=False) as r:
                await r.content.read(MAX_ANSWER)
                status = r.status
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, TargetRefused):
                return Answer(None, str(e.os_error))
            return Answer(None, connect_failure(e))
        except TargetRefused as e:
            return Answer(None, str(e))
        except TimeoutError:
            return Answer(None, f"no answer within {self._settings().timeout}")
        except aiohttp.ClientError as e:
            return Answer(None, f"the connection failed: {type(e).__name__}")
        if 200 <= status < 300:
            return Answer(status)
        return Answer(status, f"the webhook answered {status}")

    async def _secret(self, hook: Webhook) -> str:
        if self._key is None:
            try:
                self._key = await asyncio.to_thread(read_master_key, self.master_key_path)
            except FileNotFoundError:
                raise TrustError(f"there is no master key at {self.master_key_path}") from None
        assert hook.secret_sealed is not None
        return self._key.unseal(hook.secret_sealed, secret_purpose(hook.id)).decode()
