"""Guardrail policies on the client API, against a real server and a sim-engine that echoes what it received."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.waiting import wait_for

ASK = [{"role": "user", "content": "write to Ayşe Yılmaz at ayse@example.com"}]


def _policies(restore: bool) -> dict:
    return {"default": ["privacy"], "policies": {"privacy": {
        "mode": "enforce", "input": {"pii": {"email": "redact", "person": "redact"}, "restore": restore,
                                     "secrets": "block"}}}}


@pytest.fixture
def guarded(servers, engines, tmp_path):
    from tests.support.servers import write_config

    def make(restore: bool):
        engine = engines("qwen", "--echo")
        config = write_config(tmp_path / "server.yaml", {
            "models": [{"name": "qwen", "endpoints": [engine.url]}], "guard": _policies(restore)})
        server = servers("gw", config=config)
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.key = json.loads(done.stdout)["key"]["key"]
        server.start()
        server.openai = openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)
        return server

    return make


def _streamed(client) -> str:
    chunks = client.chat.completions.create(model="qwen", messages=ASK, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_redacted_values_reach_the_engine_as_placeholders(guarded):
    gw = guarded(restore=False)
    echoed = gw.openai.chat.completions.create(model="qwen", messages=ASK).choices[0].message.content
    assert echoed.strip() == "write to [PERSON_1] at [EMAIL_1]"
    assert _streamed(gw.openai).strip() == "write to [PERSON_1] at [EMAIL_1]"


def test_restore_gives_the_client_its_own_values_back_streamed_and_not(guarded):
    gw = guarded(restore=True)
    answer = gw.openai.chat.completions.create(model="qwen", messages=ASK)
    assert answer.choices[0].message.content.strip() == "write to Ayşe Yılmaz at ayse@example.com"
    assert _streamed(gw.openai).strip() == "write to Ayşe Yılmaz at ayse@example.com"
    request_id = gw.openai.chat.completions.with_raw_response.create(
        model="qwen", messages=ASK).headers["x-request-id"]

    def record():
        done = gw.ctl("ctl", "request", request_id, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    row, _ = wait_for(record, timeout=10, interval=0.2)
    rules = {(d["rule"], d["action"], d["direction"]) for d in row["detail"]["guard"]}
    assert ("pii:email", "redact", "input") in rules and ("pii:person", "redact", "input") in rules
    assert "ayse" not in json.dumps(row).lower()


def test_a_secret_in_the_prompt_is_refused_naming_the_rule_not_the_secret(guarded):
    gw = guarded(restore=True)
    secret = "sk-proj-" + "a1B2c3D4" * 6
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=[{"role": "user", "content": f"use {secret}"}])
    assert refused.value.body["code"] == "guardrail_blocked"
    assert "secrets" in refused.value.body["message"] and secret not in refused.value.body["message"]
