"""The webhooks as the admin API keeps them: add, list, remove, test, and their deliveries.

A webhook's signing secret is sealed under the master key as it is added and
never read back out: the list shows whether one is set, never what it is,
and the audit log records the change without it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

from llmgw.errors import N_
from llmgw.events import KINDS, Event
from llmgw.notify.bodies import event_doc, render
from llmgw.notify.delivery import Sender, new_delivery_id, secret_purpose
from llmgw.notify.targets import NotifyError, check_url
from llmgw.store import Delivery, Webhook, WebhookStore
from llmgw.trust import TrustError, ensure_master_key

FORMATS = ("json", "slack")
STATES = ("pending", "delivered", "failed")
MAX_SECRET = 4096


class WebhookView(TypedDict):
    """A webhook as the admin API shows it: whether it signs, never its secret."""

    id: str
    url: str
    events: list[str]  # event kinds, or ["*"] for every one
    format: str
    signed: bool
    allow_private: bool
    enabled: bool
    created_at: float
    place: str  # "org:ID" or "team:ID" for a tenant administrator's, sent only that place's events; "" the cluster's


class DeliveryView(TypedDict):
    id: str
    webhook_id: str
    event: str  # the event's kind
    state: str  # pending, delivered or failed
    attempts: int
    next_attempt_at: float | None  # None once it is no longer pending
    last_status: int | None
    last_error: str
    created_at: float
    delivered_at: float | None


class TestDelivery(DeliveryView):
    """A test event's delivery, with the address it was sent to."""

    url: str


def webhook_view(hook: Webhook) -> WebhookView:
    """A webhook as `ctl webhooks list` and the audit log show it: whether it signs, never its secret."""
    return {"id": hook.id, "url": hook.url, "events": list(hook.events), "format": hook.format,
            "signed": hook.secret_sealed is not None, "allow_private": hook.allow_private,
            "enabled": hook.enabled, "created_at": hook.created_at, "place": hook.place}


def delivery_view(d: Delivery) -> DeliveryView:
    return {"id": d.id, "webhook_id": d.webhook_id, "event": d.event_kind, "state": d.state,
            "attempts": d.attempts, "next_attempt_at": d.next_attempt_at if d.state == "pending" else None,
            "last_status": d.last_status, "last_error": d.last_error, "created_at": d.created_at,
            "delivered_at": d.delivered_at}


def parse_events(events: Sequence[str] | None) -> tuple[str, ...]:
    if not events or list(events) == ["*"] or list(events) == ["all"]:
        return ("*",)
    unknown = [e for e in events if e not in KINDS]
    if unknown:
        raise NotifyError(N_("{unknown} is not an event; the events are {kinds} (or all)"),
                          params={"unknown": ", ".join(unknown), "kinds": ", ".join(KINDS)})
    return tuple(dict.fromkeys(events))


class Webhooks:
    def __init__(self, store: WebhookStore, sender: Sender, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.sender = sender
        self._clock = clock

    async def add(self, url: str, *, events: Sequence[str] | None = None, format: str = "json",
                  secret: str | None = None, allow_private: bool = False, place: str = "") -> WebhookView:
        """A webhook for every event of the kinds given; with `place` ("org:ID", "team:ID"), only that place's
        (llmgw.notify.delivery.wants)."""
        check_url(url, allow_private)
        if format not in FORMATS:
            raise NotifyError(N_('--format is json or slack, not "{format}"'), params={"format": format})
        kinds = parse_events(events)
        hook_id = "wh_" + secrets.token_hex(6)
        sealed = None
        if secret is not None:
            secret = secret.strip()
            if not secret or len(secret) > MAX_SECRET or any(not c.isprintable() for c in secret):
                raise NotifyError(N_("a signing secret is one line of 1-{most} printable characters"),
                                  params={"most": MAX_SECRET})
            try:
                # ensure: the master key a control plane made at its first start; a webhook added before
                # the cluster's CA made one makes it, as the CA would.
                key = await asyncio.to_thread(ensure_master_key, self.sender.master_key_path)
            except (OSError, TrustError) as e:
                raise NotifyError(N_("the signing secret cannot be sealed here: {reason}"),
                                  status=503, code="master_key", params={"reason": str(e)}) from None
            sealed = key.seal(secret.encode(), secret_purpose(hook_id))
        hook = Webhook(hook_id, url, kinds, format, sealed, allow_private, True, self._clock(), place)
        await self.store.add_webhook(hook)
        return webhook_view(hook)

    async def all(self) -> list[WebhookView]:
        return [webhook_view(h) for h in await self.store.list_webhooks()]

    async def get(self, hook_id: str) -> Webhook:
        hook = await self.store.webhook(hook_id)
        if hook is None:
            raise NotifyError(N_("no webhook {id}; llmgw ctl webhooks list shows them"), status=404,
                              code="not_found", params={"id": hook_id})
        return hook

    async def remove(self, hook_id: str) -> WebhookView:
        hook = await self.get(hook_id)
        await self.store.delete_webhook(hook_id)
        return webhook_view(hook)

    async def test(self, hook_id: str) -> TestDelivery:
        """Send a test event to the webhook now, once, and say how it answered. Kept as a delivery, not retried."""
        hook = await self.get(hook_id)
        now = self._clock()
        delivery_id = new_delivery_id()
        event = Event("test", hook.id, now, {"webhook_id": hook.id})
        body = render(event_doc(event, delivery_id), hook.format)
        answer = await self.sender.post(hook, delivery_id, "test", body)
        delivery = Delivery(delivery_id, hook.id, "test", body.decode(), delivery_id, attempts=1,
                            next_attempt_at=now, state="delivered" if answer.taken else "failed",
                            last_status=answer.status, last_error=answer.error, created_at=now,
                            delivered_at=self._clock() if answer.taken else None)
        await self.store.add_deliveries([delivery])
        return TestDelivery(**delivery_view(delivery), url=hook.url)

    async def deliveries(self, hook_id: str | None = None, state: str | None = None,
                         limit: int = 100) -> list[DeliveryView]:
        if hook_id is not None:
            await self.get(hook_id)
        if state is not None and state not in STATES:
            raise NotifyError(N_('--state is pending, delivered or failed, not "{state}"'), params={"state": state})
        return [delivery_view(d) for d in await self.store.list_deliveries(hook_id, state, limit)]


def read_secret_file(path: str) -> str:
    """A signing secret from a file (`--secret-file`), for the CLI: the file's first line."""
    with open(os.path.expanduser(path), encoding="utf-8") as f:
        return f.readline().strip()
