"""Breakers with a real llmgw server and real sim-engines.

One client's failures are its own; a dead engine is everyone's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from tests.support.servers import breaker_state, serving_with_first_key, write_config
from tests.support.waiting import wait_for

CHAT = [{"role": "user", "content": "Say something."}]
POISON = [{"role": "user", "content": "Please crash the engine."}]


@pytest.fixture
def gateway(servers, tmp_path):
    def make(models: list[dict], **cluster):
        server = servers("gw", config=write_config(tmp_path / "gw.yaml", {"models": models, **cluster}))
        return serving_with_first_key(server)

    return make


def client(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.client_url + "/v1", max_retries=0)


def other_key(gw) -> openai.OpenAI:
    made = gw.ctl_json("keys", "create", "bystander", "--project", "Default/default/default")
    return client(gw, made["key"])


def ready(gw) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(gw.client_url + "/ready", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_one_key_whose_prompts_make_the_engine_fail_takes_the_model_from_nobody_else(gateway, engines):
    engine = engines("qwen", "--fail-on", "crash=500")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"breaker": {"failures": 2, "open_for": "1m"}, "retries": 0})
    bystander = other_key(gw)
    for _ in range(8):  # four times the count that opened the breaker before
        with pytest.raises(openai.APIStatusError) as failed:
            gw.openai.chat.completions.create(model="qwen", messages=POISON, max_tokens=1)
        assert failed.value.status_code == 502
    assert bystander.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1).choices
    assert breaker_state(gw) == "closed"
    assert ready(gw) == (200, {"ready": True, "models": ["qwen"], "failing": []})
    assert "is passed over" not in gw.output()


def test_failed_answers_from_two_keys_open_the_breaker_and_refuse_at_once(gateway, engines):
    engine = engines("qwen", "--fail-on", "crash=500")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"breaker": {"failures": 2, "open_for": "1m"}, "retries": 0})
    second = other_key(gw)
    for asker in (gw.openai, second):
        with pytest.raises(openai.APIStatusError):
            asker.chat.completions.create(model="qwen", messages=POISON, max_tokens=1)
    with pytest.raises(openai.APIStatusError) as refused:
        second.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
    assert refused.value.status_code == 503 and refused.value.body["code"] == "replicas_failing"
    assert breaker_state(gw) == "open"


def test_an_engine_that_dies_is_refused_at_once_with_when_to_come_back_and_served_again_once_back(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"breaker": {"failures": 2, "open_for": "10s"}, "retries": 0})
    assert gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1).choices
    engine.stop()
    for _ in range(2):  # connection refused, from one key: the engine's failure whoever asks
        with pytest.raises(openai.APIStatusError) as failed:
            gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
        assert failed.value.status_code == 502
    with pytest.raises(openai.APIStatusError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
    assert refused.value.status_code == 503 and refused.value.body["code"] == "replicas_failing"
    retry = int(refused.value.response.headers["Retry-After"])
    assert 1 <= retry <= 10
    assert refused.value.body["message"].startswith("every replica of qwen is failing (connection failed:")
    assert f"try again in {retry} s" in refused.value.body["message"]
    status, body = ready(gw)
    assert status == 503 and body["ready"] is False and body["failing"] == ["qwen"]
    assert "every replica of qwen is failing" in body["message"]

    engine.start()

    def answered() -> bool:
        try:
            return bool(gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1).choices)
        except openai.APIStatusError:
            return False

    back, _ = wait_for(answered, timeout=40, interval=0.5)
    assert back
    assert breaker_state(gw) == "closed"
    assert ready(gw) == (200, {"ready": True, "models": ["qwen"], "failing": []})


def _on_its_own_connection(gw, path: str, data: bytes | None = None) -> tuple[int, str | None, dict]:
    """A request on a new connection (so the kernel may hand it to either worker): status, worker, body."""
    headers = {"Authorization": f"Bearer {gw.key}", "Content-Type": "application/json", "Connection": "close"}
    request = urllib.request.Request(gw.client_url + path, data=data, headers=headers,
                                     method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers.get("x-llmgw-worker"), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("x-llmgw-worker"), json.loads(e.read())


def test_a_dead_engine_is_refused_at_once_and_unready_on_every_worker(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}], workers=2,
                 router={"breaker": {"failures": 2, "open_for": "1m"}, "retries": 0})
    engine.stop()
    body = json.dumps({"model": "qwen", "messages": CHAT, "max_tokens": 1}).encode()
    opened, _ = wait_for(lambda: _on_its_own_connection(gw, "/v1/chat/completions", body)[0] == 503, timeout=20)
    assert opened
    answers = [_on_its_own_connection(gw, "/v1/chat/completions", body) for _ in range(12)]
    assert {(status, b["error"]["code"]) for status, _, b in answers} == {(503, "replicas_failing")}
    readiness = [_on_its_own_connection(gw, "/ready") for _ in range(12)]
    assert {(status, tuple(b["failing"])) for status, _, b in readiness} == {(503, ("qwen",))}
    assert len({worker for _, worker, _ in answers + readiness}) == 2, "one worker answered everything"
