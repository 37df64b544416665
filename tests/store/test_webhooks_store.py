"""Webhooks and their deliveries in the store: kept before sending, one per once-key, due in order."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Delivery, StoreError, Webhook


async def test_a_webhook_reads_back_as_written_with_its_sealed_secret(store):
    hook = Webhook("wh_1", "https://ops.example.com/llmgw", ("budget_80", "node_lost"), "json", b"\x00sealed\xff",
                   False, True, 1.0)
    await store.add_webhook(hook)
    await store.add_webhook(Webhook("wh_2", "https://hooks.slack.com/services/x", ("*",), "slack", None, True,
                                    True, 2.0))

    assert await store.webhook("wh_1") == hook
    assert [(h.id, h.format, h.secret_sealed, h.allow_private) for h in await store.list_webhooks()] == [
        ("wh_1", "json", b"\x00sealed\xff", False), ("wh_2", "slack", None, True)]
    with pytest.raises(Conflict):
        await store.add_webhook(hook)
    assert await store.webhook("wh_9") is None


async def test_an_event_that_happens_once_is_one_delivery_per_webhook_whoever_writes_it(store):
    await store.add_webhook(Webhook("wh_1", "https://a.example/", created_at=1.0))
    await store.add_webhook(Webhook("wh_2", "https://b.example/", created_at=1.0))
    once = "budget_80:team:t1:month:1772323200"

    first = [Delivery(f"dl_{h}a", h, "budget_80", '{"kind":"budget_80"}', once, created_at=5.0, next_attempt_at=5.0)
             for h in ("wh_1", "wh_2")]
    again = [Delivery(f"dl_{h}b", h, "budget_80", '{"kind":"budget_80"}', once, created_at=6.0, next_attempt_at=6.0)
             for h in ("wh_1", "wh_2")]
    # Two with no once-key are two deliveries.
    plain = [Delivery(f"dl_k{i}", "wh_1", "key_revoked", "{}", created_at=7.0 + i, next_attempt_at=7.0 + i)
             for i in range(2)]

    assert await store.add_deliveries(first) == 2
    assert await store.add_deliveries(again) == 0
    assert await store.add_deliveries(plain) == 2
    assert await store.add_deliveries([Delivery("dl_x", "wh_gone", "key_revoked", "{}")]) == 0
    assert sorted(d.id for d in await store.list_deliveries()) == ["dl_k0", "dl_k1", "dl_wh_1a", "dl_wh_2a"]
    assert [d.id for d in await store.list_deliveries("wh_1")] == ["dl_k1", "dl_k0", "dl_wh_1a"]


async def test_due_deliveries_come_soonest_first_and_an_attempt_is_recorded(store):
    await store.add_webhook(Webhook("wh_1", "https://a.example/", created_at=1.0))
    await store.add_deliveries([
        Delivery("dl_late", "wh_1", "node_lost", "{}", created_at=1.0, next_attempt_at=50.0),
        Delivery("dl_soon", "wh_1", "node_lost", "{}", created_at=2.0, next_attempt_at=10.0),
        Delivery("dl_done", "wh_1", "node_lost", "{}", created_at=3.0, next_attempt_at=5.0, state="delivered"),
    ])
    assert [d.id for d in await store.due_deliveries(20.0)] == ["dl_soon"]
    assert [d.id for d in await store.due_deliveries(60.0)] == ["dl_soon", "dl_late"]

    soon = await store.delivery("dl_soon")
    retried = Delivery(**{**soon.__dict__, "attempts": 1, "next_attempt_at": 40.0, "last_status": 503,
                          "last_error": "the webhook answered 503"})
    await store.record_attempt(retried)
    assert await store.delivery("dl_soon") == retried
    assert [d.id for d in await store.due_deliveries(45.0)] == ["dl_soon"]
    done = Delivery(**{**retried.__dict__, "attempts": 2, "state": "delivered", "last_status": 200,
                       "last_error": "", "delivered_at": 46.0})
    await store.record_attempt(done)
    assert [d.id for d in await store.due_deliveries(100.0)] == ["dl_late"]
    assert [d.id for d in await store.list_deliveries(state="delivered")] == ["dl_done", "dl_soon"]


async def test_a_removed_webhook_takes_its_deliveries_with_it(store):
    await store.add_webhook(Webhook("wh_1", "https://a.example/", created_at=1.0))
    await store.add_deliveries([Delivery("dl_1", "wh_1", "node_lost", "{}", created_at=1.0)])
    assert await store.delete_webhook("wh_1") is True
    assert await store.delete_webhook("wh_1") is False
    assert await store.list_deliveries() == [] and await store.due_deliveries(1e12) == []
    with pytest.raises(StoreError, match="no delivery dl_1"):
        await store.record_attempt(Delivery("dl_1", "wh_1", "node_lost", "{}", attempts=1))
