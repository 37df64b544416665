"""Events for the notification webhooks: once an hour per kind and subject, never text or secrets."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.events import Events


def test_the_same_event_about_the_same_subject_is_delivered_once_an_hour():
    now = [0.0]
    events = Events(clock=lambda: now[0])
    seen = []
    events.subscribe(seen.append)
    assert events.emit("judge_unavailable", subject="qwen3guard", reason="2 tries; answered 503")
    assert not events.emit("judge_unavailable", subject="qwen3guard", reason="again")
    assert events.emit("judge_unavailable", subject="other-judge")
    assert events.emit("service_unavailable", subject="qwen3guard")  # another kind
    now[0] = 3599
    assert not events.emit("judge_unavailable", subject="qwen3guard")
    now[0] = 3601
    assert events.emit("judge_unavailable", subject="qwen3guard")
    assert [(e.kind, e.subject, e.held_back) for e in seen] == [
        ("judge_unavailable", "qwen3guard", 0), ("judge_unavailable", "other-judge", 0),
        ("service_unavailable", "qwen3guard", 0), ("judge_unavailable", "qwen3guard", 2)]
    assert seen[0].to_dict()["reason"] == "2 tries; answered 503"


def test_an_event_refuses_to_carry_text_or_secrets():
    events = Events()
    for name in ("text", "prompt", "api_key", "authorization", "token"):
        with pytest.raises(ValueError, match="never text or secrets"):
            events.emit("external_key_refused", subject="external:gpt-4o#2", **{name: "x"})
    with pytest.raises(ValueError, match="not an event kind"):
        events.emit("something_else")
    with pytest.raises(ValueError):
        events.emit("judge_unavailable", subject="j", reason={"nested": "doc"})


def test_a_long_field_is_cut_short():
    events = Events()
    seen = []
    events.subscribe(seen.append)
    events.emit("service_unavailable", subject="lakera", reason="x" * 1000)
    assert len(seen[0].fields["reason"]) == 300


async def test_async_subscribers_are_run_and_a_failing_one_harms_no_one():
    events = Events()
    got = []

    async def webhook(event):
        await asyncio.sleep(0.01)
        got.append(event.kind)

    def broken(event):
        raise RuntimeError("webhook down")

    events.subscribe(broken)
    unsubscribe = events.subscribe(webhook)
    assert events.emit("external_key_refused", subject="external:gpt-4o#2", endpoint="external:gpt-4o#2")
    await events.drain()
    assert got == ["external_key_refused"]
    unsubscribe()
    events.emit("external_key_refused", subject="external:claude#1")
    await events.drain()
    assert got == ["external_key_refused"]


def test_a_cluster_wide_event_is_told_only_while_this_process_leads():
    leading = [False]
    events = Events(leading=lambda: leading[0])
    seen = []
    events.subscribe(seen.append)
    for kind in ("node_lost", "replica_failed", "leader_changed"):
        assert not events.emit(kind, subject="n1")
    # Seen by whichever process serves the request: told wherever it happens.
    assert events.emit("key_revoked", subject="key_1", key_id="key_1")
    leading[0] = True
    assert events.emit("node_lost", subject="n1", node="gpu-1")
    assert [e.kind for e in seen] == ["key_revoked", "node_lost"]


def test_an_event_that_happens_once_carries_its_once_key():
    events = Events()
    seen = []
    events.subscribe(seen.append)
    events.emit("key_expired", subject="key_1", once="key_expired:key_1", key_id="key_1")
    events.emit("key_revoked", subject="key_2", key_id="key_2")
    assert [e.once for e in seen] == ["key_expired:key_1", ""]
