"""Deliveries to a real receiver on loopback: signed, retried with a growing wait, given up after a day,
and never sent to loopback, link-local or metadata addresses unless allowed."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmgw.config.notify import NotifySettings
from llmgw.config.types import Duration
from llmgw.events import Events
from llmgw.notify import NotifyError, Recorder, Sender, Webhooks, backoff
from llmgw.store import Webhook, open_store
from tests.support.webhookreceiver import Receiver, docs_verify


@pytest.fixture
async def store(tmp_path):
    """SQLite alone: the store's own tests run on both dialects (tests/store/test_webhooks_store.py)."""
    opened = await open_store(f"sqlite:{tmp_path / 'llmgw.db'}")
    yield opened
    await opened.close()


@pytest.fixture
async def receiver():
    got = Receiver()
    runner = await got.start()
    yield got
    await runner.cleanup()


class Clock:
    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _parts(store, tmp_path, clock, **settings) -> tuple[Events, Sender, Webhooks]:
    current = NotifySettings(**{k: Duration(v) for k, v in settings.items()})
    sender = Sender(store, lambda: current, str(tmp_path), leading=lambda: True, clock=clock)
    events = Events(clock=clock)
    events.subscribe(Recorder(store, wake=sender.wake, clock=clock))
    return events, sender, Webhooks(store, sender, clock=clock)


async def test_a_signed_delivery_verifies_with_the_docs_snippet_and_only_with_its_secret(store, receiver, tmp_path):
    clock = Clock(time.time())
    events, sender, hooks = _parts(store, tmp_path, clock)
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret-of-the-receiver\n")
    hook = await hooks.add(receiver.url, secret="s3cret-of-the-receiver", allow_private=True)
    assert hook["signed"] is True and "secret" not in str(hook)

    events.emit("key_revoked", subject="key_1", key_id="key_1", key_name="ci", project="Acme/ml/chat",
                by="admin", via="cli")
    await events.drain()
    assert await sender.send_due() == 1
    await sender.stop()

    [got] = receiver.got
    verify = docs_verify()
    h = got.headers
    assert h["Content-Type"] == "application/json" and h["X-Llmgw-Event"] == "key_revoked"
    assert h["X-Llmgw-Delivery"] == got.doc["id"] and h["X-Llmgw-Signature"].startswith("sha256=")
    assert verify("s3cret-of-the-receiver", h["X-Llmgw-Timestamp"], got.body, h["X-Llmgw-Signature"])
    assert not verify("another-secret", h["X-Llmgw-Timestamp"], got.body, h["X-Llmgw-Signature"])
    assert not verify("s3cret-of-the-receiver", h["X-Llmgw-Timestamp"], got.body + b" ", h["X-Llmgw-Signature"])
    assert got.doc["kind"] == "key_revoked" and got.doc["key_name"] == "ci"
    # The store keeps the secret sealed, never as written.
    [kept] = await store.list_webhooks()
    assert b"s3cret" not in (kept.secret_sealed or b"")


async def test_a_webhook_that_fails_twice_gets_the_event_once_after_growing_waits(store, receiver, tmp_path):
    clock = Clock()
    events, sender, hooks = _parts(store, tmp_path, clock, retry_first="10s")
    receiver.failing = 2
    await hooks.add(receiver.url, events=["node_lost"], allow_private=True)

    events.emit("node_lost", subject="n1", node="gpu-1", node_id="n1")
    events.emit("key_revoked", subject="key_1", key_id="key_1")  # not among its events
    await events.drain()
    assert await sender.send_due() == 1  # answered 503
    assert await sender.send_due() == 0  # not due for 10 s
    clock.now += 10
    assert await sender.send_due() == 1  # 503 again
    clock.now += 29
    assert await sender.send_due() == 0  # the second wait is 30 s
    clock.now += 1
    assert await sender.send_due() == 1
    clock.now += 3600
    assert await sender.send_due() == 0
    await sender.stop()

    assert [r.status for r in receiver.got] == [503, 503, 200]
    assert len({r.headers["X-Llmgw-Delivery"] for r in receiver.got}) == 1
    [row] = await hooks.deliveries()
    assert (row["state"], row["attempts"], row["last_status"]) == ("delivered", 3, 200)
    assert [backoff(n, 10) for n in range(1, 8)] == [10, 30, 120, 600, 1800, 3600, 3600]


async def test_a_delivery_not_taken_for_a_day_is_marked_failed_with_the_last_answer(store, receiver, tmp_path):
    clock = Clock()
    events, sender, hooks = _parts(store, tmp_path, clock, retry_first="10m", give_up_after="1h")
    receiver.failing = 100
    hook = await hooks.add(receiver.url, allow_private=True)
    events.emit("leader_changed", subject="cp-1", leader="cp-1", address="http://cp-1:8080")
    await events.drain()
    for _ in range(5):
        await sender.send_due()
        clock.now += 30 * 60
    await sender.stop()

    [row] = await hooks.deliveries(hook["id"], "failed")
    assert row["attempts"] == 3 and row["last_status"] == 503 and row["last_error"] == "the webhook answered 503"
    assert len(receiver.got) == 3


async def test_a_slack_webhook_gets_a_sentence_and_the_event_once_an_hour(store, receiver, tmp_path):
    clock = Clock()
    events, sender, hooks = _parts(store, tmp_path, clock)
    await hooks.add(receiver.url, format="slack", allow_private=True)
    for _ in range(3):
        events.emit("guardrail_blocked", subject="prj_1", project="Acme/ml/chat", policies=["strict"],
                    rules=["secrets:github"], direction="input", blocks=1)
    clock.now += 3601
    events.emit("guardrail_blocked", subject="prj_1", project="Acme/ml/chat", policies=["strict"],
                rules=["secrets:github"], direction="input", blocks=1)
    await events.drain()
    await sender.send_due()
    await sender.stop()

    # Sent side by side: in whichever order they land.
    assert sorted((r.doc for r in receiver.got), key=lambda d: len(d["text"])) == [
        {"text": "llmgw: the guardrails (strict) blocked a request of Acme/ml/chat: secrets:github"},
        {"text": "llmgw: the guardrails (strict) blocked a request of Acme/ml/chat: secrets:github "
                 "(2 more like it this past hour)"}]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9090/api/v1/keys", "http://localhost/hook", "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/", "http://[::1]/hook", "http://[fe80::1]/hook",
    "http://100.100.100.200/", "http://0.0.0.0:9090/",
])
async def test_a_url_at_loopback_link_local_or_metadata_is_refused_when_added(store, tmp_path, url):
    _, sender, hooks = _parts(store, tmp_path, Clock())
    with pytest.raises(NotifyError, match="unless it is added with --allow-private"):
        await hooks.add(url)
    assert await store.list_webhooks() == []
    await sender.stop()


async def test_a_bad_url_format_or_event_is_refused_with_a_sentence(store, tmp_path):
    _, sender, hooks = _parts(store, tmp_path, Clock())
    with pytest.raises(NotifyError, match="http:// or https:// with a host"):
        await hooks.add("ftp://ops.example.com/x")
    with pytest.raises(NotifyError, match="budget_90 is not an event"):
        await hooks.add("https://ops.example.com/x", events=["budget_90"])
    with pytest.raises(NotifyError, match="json or slack"):
        await hooks.add("https://ops.example.com/x", format="xml")
    private = await hooks.add("https://10.1.2.3/hook")  # a private network: allowed without the flag
    assert private["allow_private"] is False
    await sender.stop()


async def test_a_webhook_whose_address_is_loopback_by_the_time_it_is_sent_is_not_connected_to(
        store, receiver, tmp_path):
    # As a name whose DNS now answers 127.0.0.1 would be: the row says not allowed, the address is loopback.
    clock = Clock()
    events, sender, hooks = _parts(store, tmp_path, clock)
    await store.add_webhook(Webhook("wh_dns", receiver.url, ("*",), "json", None, False, True, clock.now))
    events.emit("replica_failed", subject="r1", replica="r1", model="qwen", node_id="n1", reason="exited")
    await events.drain()
    await sender.send_due()
    await sender.stop()

    assert receiver.got == []
    [row] = await hooks.deliveries("wh_dns")
    assert row["state"] == "pending" and row["last_status"] is None
    assert "127.0.0.1 is this machine (loopback); webhooks are not connected to it" in row["last_error"]


async def test_only_the_leader_sends_and_a_removed_webhook_is_sent_nothing(store, receiver, tmp_path):
    clock = Clock()
    leading = [False]
    current = NotifySettings(send_every=Duration("50ms"))
    sender = Sender(store, lambda: current, str(tmp_path), leading=lambda: leading[0], clock=clock)
    events = Events(clock=clock)
    events.subscribe(Recorder(store, clock=clock))
    hooks = Webhooks(store, sender, clock=clock)
    kept = await hooks.add(receiver.url, allow_private=True)
    gone = await hooks.add(receiver.url + "?gone", allow_private=True)
    events.emit("key_revoked", subject="key_1", key_id="key_1")
    await events.drain()
    await hooks.remove(gone["id"])

    sender.start()
    try:
        sender.wake()
        # A negative, with nothing to poll for: four rounds of send_every (50 ms) would have sent it.
        await asyncio.sleep(0.2)
        assert receiver.got == []  # a standby keeps them for the leader
        leading[0] = True
        sender.wake()
        for _ in range(100):
            if receiver.got:
                break
            await asyncio.sleep(0.02)
    finally:
        await sender.stop()
    assert [r.doc["kind"] for r in receiver.got] == ["key_revoked"]
    assert [d["webhook_id"] for d in await hooks.deliveries()] == [kept["id"]]
