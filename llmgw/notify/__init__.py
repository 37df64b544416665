"""Notification webhooks: the events bus's events sent to the URLs an administrator added.

`Notifier` is what a control plane holds: the recorder it subscribes to its
events bus (a delivery row per webhook, before any send), the sender that
posts due deliveries while it leads, and the webhooks' admin operations.
A router worker process holds only a `Recorder` on its own bus. How it
works: docs/webhooks.md; the floor it stands on: docs/internals.md.
"""

from __future__ import annotations

from collections.abc import Callable

from llmgw.config import NotifySettings
from llmgw.events import Events
from llmgw.notify.delivery import Answer, Recorder, Sender, backoff, wants
from llmgw.notify.signing import sign, verify
from llmgw.notify.targets import NotifyError, check_url
from llmgw.notify.webhooks import Webhooks, delivery_view, read_secret_file, webhook_view
from llmgw.store import WebhookStore

__all__ = ["Notifier", "Recorder", "Sender", "Webhooks", "NotifyError", "Answer", "backoff", "sign", "verify",
           "check_url", "webhook_view", "delivery_view", "read_secret_file", "wants"]


class Notifier:
    def __init__(self, store: WebhookStore, events: Events, settings: Callable[[], NotifySettings], data_dir: str, *,
                 leading: Callable[[], bool]) -> None:
        self.sender = Sender(store, settings, data_dir, leading=leading)
        self.recorder = Recorder(store, wake=self.sender.wake)
        self.webhooks = Webhooks(store, self.sender)
        self._events = events
        self._unsubscribe = events.subscribe(self.recorder)

    def start(self) -> None:
        self.sender.start()

    async def stop(self) -> None:
        """After the events still being recorded are in the store; before the store closes."""
        await self._events.drain()
        self._unsubscribe()
        await self.sender.stop()
