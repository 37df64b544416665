"""Store methods for the notification webhooks: the webhooks, and each event's delivery to each.

A delivery is written before it is sent and changed after each attempt, so
the sender (on the leader) can stop at any point and the next one — after a
restart, or on a new leader — carries on from the rows. `(webhook_id,
once_key)` is unique: an event that happens once (a budget's 80 % in a
period) that two control planes both saw is one row, the second insert
doing nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.store.driver import Driver, Duplicate, MissingParent, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import Delivery, Webhook
from llmgw.store.sql_json import dump_json, load_json

_HOOK = "id, url, events, format, secret_sealed, allow_private, enabled, created_at, place"
_DELIVERY = ("id, webhook_id, event_kind, body, once_key, attempts, next_attempt_at, state, last_status, last_error, "
             "created_at, delivered_at")


def _hook(r: Row) -> Webhook:
    sealed = r[4]
    return Webhook(r[0], r[1], tuple(load_json(r[2]) or ("*",)), r[3], None if sealed is None else bytes(sealed),
                   bool(r[5]), bool(r[6]), float(r[7]), r[8] or "")


def _delivery(r: Row) -> Delivery:
    return Delivery(r[0], r[1], r[2], r[3], r[4], int(r[5]), float(r[6]), r[7], r[8], r[9] or "", float(r[10]),
                    None if r[11] is None else float(r[11]))


class NotifySQL:
    """See llmgw.store.Store's webhooks section for each method."""

    _db: Driver

    async def add_webhook(self, hook: Webhook) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO webhooks ({_HOOK}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                hook.id, hook.url, dump_json(list(hook.events)), hook.format, hook.secret_sealed,
                bool(hook.allow_private), bool(hook.enabled), float(hook.created_at), hook.place)
        except Duplicate:
            raise Conflict(f"there is already a webhook with the id {hook.id}") from None

    async def webhook(self, webhook_id: str) -> Webhook | None:
        row = await self._db.fetchrow(f"SELECT {_HOOK} FROM webhooks WHERE id = $1", webhook_id)
        return None if row is None else _hook(row)

    async def list_webhooks(self) -> list[Webhook]:
        return [_hook(r) for r in await self._db.fetch(f"SELECT {_HOOK} FROM webhooks ORDER BY created_at, id")]

    async def delete_webhook(self, webhook_id: str) -> bool:
        # Its deliveries go with it (ON DELETE CASCADE): nothing is sent to a webhook removed.
        async with self._db.transaction() as tx:
            await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = $1", webhook_id)
            row = await tx.fetchrow("DELETE FROM webhooks WHERE id = $1 RETURNING id", webhook_id)
        return row is not None

    async def add_deliveries(self, deliveries: Sequence[Delivery]) -> int:
        added = 0
        async with self._db.transaction() as tx:
            for d in deliveries:
                try:
                    row = await tx.fetchrow(
                        f"INSERT INTO webhook_deliveries ({_DELIVERY}) VALUES "
                        "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
                        "ON CONFLICT (webhook_id, once_key) DO NOTHING RETURNING id",
                        d.id, d.webhook_id, d.event_kind, d.body, d.once_key or d.id, d.attempts,
                        float(d.next_attempt_at), d.state, d.last_status, d.last_error, float(d.created_at),
                        d.delivered_at)
                except MissingParent:
                    continue  # its webhook was removed a moment ago
                added += row is not None
        return added

    async def delivery(self, delivery_id: str) -> Delivery | None:
        row = await self._db.fetchrow(f"SELECT {_DELIVERY} FROM webhook_deliveries WHERE id = $1", delivery_id)
        return None if row is None else _delivery(row)

    async def due_deliveries(self, now: float, limit: int = 50) -> list[Delivery]:
        rows = await self._db.fetch(
            f"SELECT {_DELIVERY} FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= $1 "
            "ORDER BY next_attempt_at, created_at, id LIMIT $2", float(now), int(limit))
        return [_delivery(r) for r in rows]

    async def list_deliveries(self, webhook_id: str | None = None, state: str | None = None,
                              limit: int = 100) -> list[Delivery]:
        where: list[str] = []
        args: list[object] = []
        for column, value in (("webhook_id", webhook_id), ("state", state)):
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_DELIVERY} FROM webhook_deliveries {'WHERE ' + ' AND '.join(where) if where else ''} "
            f"ORDER BY created_at DESC, id DESC LIMIT ${len(args)}", *args)
        return [_delivery(r) for r in rows]

    async def record_attempt(self, delivery: Delivery) -> None:
        """Write an attempt's outcome: attempts, state, next_attempt_at, last_status, last_error, delivered_at."""
        found = await self._db.fetchrow(
            "UPDATE webhook_deliveries SET attempts = $2, next_attempt_at = $3, state = $4, last_status = $5, "
            "last_error = $6, delivered_at = $7 WHERE id = $1 RETURNING id",
            delivery.id, delivery.attempts, float(delivery.next_attempt_at), delivery.state, delivery.last_status,
            delivery.last_error, delivery.delivered_at)
        if found is None:
            raise StoreError(f"there is no delivery {delivery.id} (its webhook was removed)")
