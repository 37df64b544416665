"""A stream the engine cuts is billed for what the engine made and records what the client got, on every API.

The incident (issue 10, item 8): under an output guardrail, which holds an
answer's text until a sentence is whole, a chat stream cut by the engine
billed 14 completion tokens though the client had received no text, while
/v1/messages and /v1/responses cut at the same moment billed none; all
three recorded 0 prompt tokens, because the engine's usage event, which
comes last, never came.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.support.servers import write_config
from tests.support.waiting import wait_for

PROMPT = "Say something about foxes and dogs, at some length please."
# A policy that reads the answer and holds all of it until the end (`stream: buffer_all`; output rules
# alone now release the sim's " the quick brown fox …" word by word).
HELD = {"default": ["hold"], "policies": {"hold": {"mode": "enforce", "stream": "buffer_all",
                                                   "output": {"secrets": "block"}}}}
# No policy on any request (not even `server init`'s baseline): the answer is relayed as it comes.
NONE = {"default": []}
CUT_AFTER = 6

REQUESTS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
    "completions": ("/v1/completions", {"prompt": PROMPT}),
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": PROMPT}]}),
    "responses": ("/v1/responses", {"input": PROMPT}),
}


@pytest.fixture
def gateway(servers, engines, tmp_path):
    def make(*engine_flags: str, guard: dict):
        engine = engines("qwen", *engine_flags)
        config = {"models": [{"name": "qwen", "endpoints": [engine.url]}], "guard": guard}
        server = servers("gw", config=write_config(tmp_path / "server.yaml", config))
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.key = json.loads(done.stdout)["key"]["key"]
        server.start()
        return server

    return make


def _ask(gw, api: str, stream: bool = True, prompt: str = PROMPT) -> tuple[str, str]:
    """(what the client received, the request's id), read to the end of the stream."""
    path, body = REQUESTS[api]
    body = json.loads(json.dumps(body).replace(json.dumps(PROMPT)[1:-1], json.dumps(prompt)[1:-1]))
    body = {**body, "model": "qwen", "max_tokens": 12, "stream": stream}
    if api == "responses":
        body["max_output_tokens"] = body.pop("max_tokens")
    request = urllib.request.Request(gw.client_url + path, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {gw.key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.read().decode(), r.headers["x-request-id"]
    except urllib.error.HTTPError as e:
        return e.read().decode(), e.headers["x-request-id"]


def _record(gw, request_id: str) -> dict:
    def read():
        done = gw.ctl("ctl", "request", request_id, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    # Generous: each look is a `llmgw ctl` process, slow to start on a busy machine.
    record, _ = wait_for(read, timeout=30, interval=0.2)
    return record


def _said(received: str) -> str:
    """The answer's words as the client saw them, from any of the three streams' events."""
    words = []
    for line in received.splitlines():
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        for choice in event.get("choices") or []:
            words.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
        delta = event.get("delta")
        if isinstance(delta, dict):
            words.append(delta.get("text") or "")
        elif event.get("type") == "response.output_text.delta":
            words.append(delta)
    return "".join(words)


def test_a_stream_cut_while_the_guardrail_held_its_text_bills_the_same_on_every_api(gateway):
    gw = gateway("--cut-after", str(CUT_AFTER), guard=HELD)
    records = {}
    for api in REQUESTS:
        received, request_id = _ask(gw, api)
        assert _said(received) == "", f"{api}: the guardrail held the text, yet the client got {received!r}"
        assert "stopped before the answer was complete" in received
        records[api] = _record(gw, request_id)
    for api, record in records.items():
        assert record["status"] == 502 and record["detail"]["error"] == "upstream_cut", api
        assert record["completion_tokens"] == CUT_AFTER, f"{api}: billed {record['completion_tokens']}"
        assert record["detail"]["delivered_tokens"] == 0, api
        assert record["prompt_tokens"] > 0, api
        assert set(record["detail"]["estimated"]) == {"prompt_tokens", "completion_tokens"}, api
    assert len({r["prompt_tokens"] for r in records.values()}) == 1, records


def test_a_stream_cut_with_nothing_held_bills_and_delivers_what_the_engine_made_on_every_api(gateway):
    gw = gateway("--cut-after", str(CUT_AFTER), guard=NONE)
    records = {}
    for api in REQUESTS:
        received, request_id = _ask(gw, api)
        assert _said(received).split() == ["the", "quick", "brown", "fox", "jumps", "over"], (api, received)
        records[api] = _record(gw, request_id)
    for api, record in records.items():
        assert record["completion_tokens"] == CUT_AFTER, f"{api}: billed {record['completion_tokens']}"
        # Everything billed reached the client, so nothing is said apart.
        assert "delivered_tokens" not in record["detail"], api
        assert record["prompt_tokens"] > 0, api
    assert len({r["prompt_tokens"] for r in records.values()}) == 1, records


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_whole_answer_bills_the_engines_own_counts_and_says_nothing_is_estimated(gateway, stream):
    gw = gateway(guard=HELD)
    records = {}
    for api in REQUESTS:
        received, request_id = _ask(gw, api, stream=stream)
        assert "the quick brown" in (_said(received) if stream else received), api
        records[api] = _record(gw, request_id)
    for api, record in records.items():
        assert record["status"] == 200, api
        assert record["completion_tokens"] == 12, api
        assert "estimated" not in record["detail"] and "delivered_tokens" not in record["detail"], api
    # The sim counts a prompt as its characters over four: the engine's own count, the same on every API.
    assert {r["prompt_tokens"] for r in records.values()} == {(len(PROMPT) + 3) // 4}


SECRET = "ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s"
# Output rules only: the engine (--echo) says the secret back, and the answer is stopped there.
OUTPUT_ONLY = {"default": ["out"], "policies": {"out": {"mode": "enforce", "output": {"secrets": "block"}}}}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_answer_a_guardrail_stopped_is_billed_in_full_and_records_how_much_the_client_got(gateway, stream):
    gw = gateway("--echo", guard=OUTPUT_ONLY)
    prompt = f"All is well here today. The key is {SECRET} so keep it."
    for api in ("chat", "messages", "responses"):  # the sim echoes chats only
        received, request_id = _ask(gw, api, stream=stream, prompt=prompt)
        assert SECRET not in received, api
        record = _record(gw, request_id)
        assert record is not None, (api, request_id, received)
        words = len(prompt.split())
        assert record["completion_tokens"] == words, f"{api}: billed {record['completion_tokens']}"
        if stream:
            # The words before the key were released as they came; the key was read whole, and stopped.
            assert _said(received).strip() == "All is well here today. The key is", api
            assert 0 < record["detail"]["delivered_tokens"] < words, api
        else:
            assert record["detail"]["delivered_tokens"] == 0, api


def test_a_client_that_leaves_mid_stream_is_billed_for_what_the_engine_sent_before_it_left(gateway):
    gw = gateway("--tokens-per-second", "20", guard=NONE)
    path, body = REQUESTS["chat"]
    request = urllib.request.Request(gw.client_url + path, method="POST", data=json.dumps(
        {**body, "model": "qwen", "max_tokens": 200, "stream": True}).encode(), headers={
        "Authorization": f"Bearer {gw.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        request_id = r.headers["x-request-id"]
        seen = 0
        while seen < 3:
            seen += r.readline().startswith(b"data: {")
    # Closed after three events of a 200-token answer (10 s at 20 a second).
    record = _record(gw, request_id)
    assert record["status"] == 499 and record["detail"]["error"] == "client_gone"
    assert 3 <= record["completion_tokens"] < 200
    assert record["prompt_tokens"] == (len(PROMPT) + 3) // 4
    assert set(record["detail"]["estimated"]) == {"prompt_tokens", "completion_tokens"}
