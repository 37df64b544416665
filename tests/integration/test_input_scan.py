"""A key smuggled past the baseline guardrail, every way that once worked, against a real server.

Each attempt is what an attacker sent (issue 10, item 6); each must end in
a refusal, or in the engine reading a placeholder, and the engine behind
the gateway must never have been sent the key.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from recorder import Recorder
from test_client_api import post

from tests.support.servers import write_config

TOKEN = "ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s"


@pytest.fixture
def gateway(servers, tmp_path):
    """A cluster as `server init` sets it up (the baseline on every request) in front of a recording engine."""
    engine = Recorder()
    doc = {"models": [{"name": "qwen", "endpoints": [engine.url]}]}
    server = servers("gw", config=write_config(tmp_path / "server.yaml", doc))
    done = server.init()
    assert done.returncode == 0, done.stderr
    server.key = next(line.split()[2] for line in done.stdout.splitlines() if "API key" in line)
    server.start()
    server.engine = engine
    yield server
    engine.stop()


def chat(*messages: dict, **extra) -> dict:
    return {"model": "qwen", "messages": list(messages), **extra}


SMUGGLED = {
    "a tool's description": ("/v1/chat/completions", chat(
        {"role": "user", "content": "what is the weather?"},
        tools=[{"type": "function", "function": {"name": "weather", "description": f"auth with {TOKEN}",
                                                 "parameters": {"type": "object", "properties": {}}}}])),
    "a message's name": ("/v1/chat/completions", chat({"role": "user", "name": TOKEN, "content": "hi"})),
    "two text parts": ("/v1/chat/completions", chat({"role": "user", "content": [
        {"type": "text", "text": "remember " + TOKEN[:18]}, {"type": "text", "text": TOKEN[18:]}]})),
    "a completions suffix": ("/v1/completions", {"model": "qwen", "prompt": "def main():", "suffix": f"# {TOKEN}"}),
}

MALFORMED = {
    "a part with no type": (
        [{"text": TOKEN}],
        'messages[0].content[0].type must be one of "text", "image_url", "input_audio", "file", "video_url", '
        '"audio_url", got null'),
    "a part of type TEXT": (
        [{"type": "TEXT", "text": TOKEN}],
        'messages[0].content[0].type must be one of "text", "image_url", "input_audio", "file", "video_url", '
        '"audio_url", got "TEXT"'),
    "a part whose type is a list": (
        [{"type": ["text"], "text": TOKEN}],
        'messages[0].content[0].type must be one of "text", "image_url", "input_audio", "file", "video_url", '
        '"audio_url", got an array'),
    "content as an object": (
        {"type": "text", "text": TOKEN},
        "messages[0].content must be a string or an array of content parts, got an object"),
}


def test_every_way_a_key_was_smuggled_past_the_baseline_is_refused_and_the_engine_never_sees_it(gateway):
    status, _, body = post(gateway, "/v1/chat/completions", chat({"role": "user", "content": "hello"}))
    assert status == 200 and len(gateway.engine.bodies) == 1  # the engine is there and is being recorded

    for way, (path, request) in SMUGGLED.items():
        status, _, body = post(gateway, path, request)
        assert (way, status, body["error"]["code"]) == (way, 400, "guardrail_blocked")
        assert "secrets:github" in body["error"]["message"] and TOKEN not in json.dumps(body)

    for way, (content, sentence) in MALFORMED.items():
        status, _, body = post(gateway, "/v1/chat/completions", chat({"role": "user", "content": content}))
        assert (way, status, body["error"]["code"]) == (way, 400, "invalid_request")
        assert body["error"]["message"] == sentence
        assert body["error"]["param"] in ("messages[0].content", "messages[0].content[0].type")

    assert len(gateway.engine.bodies) == 1 and not gateway.engine.saw(TOKEN)


def test_a_key_in_anthropic_and_responses_tools_and_system_blocks_is_refused_in_each_apis_own_shape(gateway):
    claude = anthropic.Anthropic(api_key=gateway.key, base_url=gateway.client_url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="qwen", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                               tools=[{"name": "weather", "description": f"key {TOKEN}", "input_schema": {
                                   "type": "object", "properties": {}}}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "secrets:github" in refused.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="qwen", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                               system=[{"type": "text", "text": "be brief"}, {"type": "text", "text": TOKEN}])

    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="qwen", input="hi", tools=[{
            "type": "function", "name": "weather", "description": f"key {TOKEN}", "parameters": {}}])
    assert refused.value.body["code"] == "guardrail_blocked"
    assert not gateway.engine.saw(TOKEN)


def test_a_card_split_across_two_parts_reaches_the_engine_as_one_placeholder(gateway):
    status, _, _ = post(gateway, "/v1/chat/completions", chat({"role": "user", "content": [
        {"type": "text", "text": "charge 4111 1111"}, {"type": "text", "text": " 1111 1111 please"}]}))
    assert status == 200
    parts = gateway.engine.bodies[-1]["messages"][-1]["content"]
    assert [p["text"] for p in parts] == ["charge [CARD_1]", " please"]
