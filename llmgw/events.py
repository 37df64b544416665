"""Events for the people who run the gateway: money running out, a key gone, a node lost, a judge down.

A small in-memory bus, a module of the bottom floor so that every floor that
sees something happen can say so: accounting (a budget at 80 % and 100 %),
account (a key revoked), the router (a key expired, a guardrail's block, an
outside provider refusing its key), the guard (a judge or a service down),
control (a node lost, a replica failed, leadership taken). One `Events` is
made by the control plane (or a router worker process) and handed to what
emits; the notification webhooks (llmgw/notify) subscribe to it. The same
kind about the same subject is delivered at most once an hour: a judge that
is down refuses a thousand requests, and that is one message, with the
count of those held back carried by the next one delivered.

An event carries names and counts — the model, the service, the endpoint,
a sentence about what failed — never a prompt, an answer or a secret. The
bus refuses fields that are named like text or credentials, so a careless
caller fails in its tests rather than in someone's Slack channel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("llmgw.events")

KINDS = (
    "budget_80",  # a level's budget (org, team, project, key) is 80 % spent this period
    "budget_100",  # ... and all of it: its requests are refused until the period ends
    "key_revoked",  # an API key revoked, by whom and through what
    "key_expired",  # an API key used after it expired (said once for the key)
    "node_lost",  # a node's agent silent for control.node_lost_after: its replicas are placed elsewhere
    "replica_failed",  # a replica that failed to start or failed running
    "guardrail_blocked",  # a request or an answer stopped by a guardrail: the policies and rules, never the text
    "external_key_refused",  # an outside provider answered 401 to one of its keys
    "leader_changed",  # a control plane took the lead
    "judge_unavailable",  # a judgment not had within the policy's latency_budget
    "service_unavailable",  # an outside guardrail service that did not answer, or answered nothing readable
)
# What the whole cluster sees the same of: told by the leader only, so that a
# standby that sees it too (a budget's spend it caught up with, a node whose
# agent it turned away) does not tell it a second time.
LEADER_ONLY = frozenset({"node_lost", "replica_failed", "leader_changed"})
DEDUPE_WINDOW = 3600.0
# Subjects remembered for the dedupe; past this the oldest are forgotten
# (and could be sent again within their hour, which is the lesser harm).
MAX_SUBJECTS = 4096
# A field's text is cut to this: a sentence about a failure, never a document.
MAX_FIELD_CHARS = 300
# Names a field may not have: what they would carry is the text or a secret.
_FORBIDDEN = frozenset({
    "text", "prompt", "answer", "content", "messages", "input", "output", "body",
    "api_key", "key", "token", "secret", "password", "authorization", "header", "headers",
})


@dataclass(frozen=True)
class Event:
    kind: str
    subject: str  # what it is about: the judge model, the service's name, the endpoint's id
    at: float  # wall-clock time it was emitted
    fields: dict[str, Any] = field(default_factory=dict)
    held_back: int = 0  # the same event emitted and not delivered since the last one that was
    # Set for what happens once, whichever control plane or process sees it (a budget's 80 % in one
    # period, a key's expiry): the webhooks keep one delivery per webhook and `once`, across the cluster
    # and its restarts. "" for the others, each delivered as it comes.
    once: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "at": self.at, "held_back": self.held_back,
                **self.fields}


Subscriber = Callable[[Event], "Awaitable[None] | None"]


class Events:
    def __init__(self, *, clock: Callable[[], float] = time.time, window: float = DEDUPE_WINDOW,
                 max_subjects: int = MAX_SUBJECTS, leading: Callable[[], bool] | None = None) -> None:
        # leading: whether this process leads; None (a router worker, a test) tells every kind.
        self._leading = leading
        self._clock = clock
        self.window = window
        self._max = max_subjects
        self._subscribers: list[Subscriber] = []
        self._last: OrderedDict[tuple[str, str], list] = OrderedDict()  # (kind, subject) -> [sent_at, held_back]
        self._tasks: set[asyncio.Task] = set()

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber(event)` for each event delivered; a coroutine function is run as a task.
        Returns the function that unsubscribes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)
        return unsubscribe

    def emit(self, kind: str, subject: str = "", *, once: str = "", **fields: Any) -> bool:
        """Deliver the event, unless the same kind about the same subject went out within the hour,
        or it is the whole cluster's to tell and this process does not lead. Returns whether it was delivered."""
        if kind not in KINDS:
            raise ValueError(f"{kind} is not an event kind; the kinds are {', '.join(KINDS)}")
        clean = {name: _field(name, value) for name, value in fields.items()}
        if kind in LEADER_ONLY and self._leading is not None and not self._leading():
            return False
        now = self._clock()
        key = (kind, subject)
        last = self._last.get(key)
        if last is not None and now - last[0] < self.window:
            last[1] += 1
            return False
        held_back = last[1] if last is not None else 0
        self._last[key] = [now, 0]
        self._last.move_to_end(key)
        while len(self._last) > self._max:
            self._last.popitem(last=False)
        event = Event(kind, subject, now, clean, held_back, once)
        for subscriber in list(self._subscribers):
            self._deliver(subscriber, event)
        return True

    def _deliver(self, subscriber: Subscriber, event: Event) -> None:
        try:
            result = subscriber(event)
        except Exception:  # one broken webhook must not fail a request
            log.exception("a subscriber to %s events failed", event.kind)
            return
        if asyncio.iscoroutine(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a subscriber to events failed: %s", task.exception())

    async def drain(self) -> None:
        """Wait for subscribers still sending (at shutdown, and in tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _field(name: str, value: Any) -> Any:
    if name.lower() in _FORBIDDEN:
        raise ValueError(f"an event may not carry {name!r}: events go to people, never text or secrets")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_FIELD_CHARS else value[:MAX_FIELD_CHARS - 1] + "…"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return [_field(name, v) for v in value][:20]
    raise ValueError(f"an event's field {name!r} must be a name, a number or a short list, not "
                     f"{type(value).__name__}")
