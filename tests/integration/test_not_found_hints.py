"""404s under /v1 that say how to mend the call, with the real SDKs and a real llmgw server (issue 11, item 9)."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.support.servers import write_config
from tests.support.waiting import wait_for


@pytest.fixture
def gateway(servers, engines, tmp_path):
    engine = engines("qwen")
    server = servers("gw", config=write_config(tmp_path / "gw.yaml",
                                               {"models": [{"name": "qwen", "endpoints": [engine.url]}]}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    return server.start()


CHAT = [{"role": "user", "content": "Say something."}]


def test_an_anthropic_client_given_a_base_url_ending_in_v1_is_told_in_its_own_shape_to_drop_it(gateway):
    # What a newcomer did: the OpenAI habit of a base URL ending in /v1, given to Anthropic's SDK.
    client = anthropic.Anthropic(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as refused:
        client.messages.create(model="qwen", max_tokens=16, messages=CHAT)
    body = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    message = body["error"]["message"]
    assert "there is no POST /v1/v1/messages here" in message
    assert f"drop /v1 from its base URL: base_url={gateway.client_url}" in message
    assert "POST /v1/messages" in message and "POST /v1/chat/completions" in message
    # The same client with the base URL it was told to use is answered.
    fixed = anthropic.Anthropic(api_key=gateway.key, base_url=gateway.client_url, max_retries=0)
    assert fixed.messages.create(model="qwen", max_tokens=16, messages=CHAT).content


def test_an_anthropic_client_with_a_wrong_key_and_base_url_reads_the_refusal_in_its_own_shape(gateway):
    client = anthropic.Anthropic(api_key="not-a-key", base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client.messages.create(model="qwen", max_tokens=16, messages=CHAT)
    assert refused.value.body["type"] == "error"
    assert "that is not an llmgw API key" in refused.value.body["error"]["message"]


def test_any_404_under_v1_names_the_endpoints_that_exist_in_openais_shape(gateway):
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        client.post("/audio/speech", body={"model": "qwen", "input": "hi"}, cast_to=object)
    error = refused.value.body
    assert error["code"] == "not_found"
    assert error["message"].startswith("there is no POST /v1/audio/speech here; this gateway serves ")
    assert "GET /v1/models" in error["message"] and "POST /v1/embeddings" in error["message"]
    doubled = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        doubled.models.list()
    assert f"the base URL has /v1 twice: drop one, as in {gateway.client_url}/v1" in refused.value.body["message"]


def test_a_request_for_an_unknown_model_is_counted_under_unknown_model_in_usage_by_model(gateway):
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=4)
    # Usage rows are written in batches: wait for the one of the refusal.
    counted, _ = wait_for(lambda: gateway.ctl_json("ctl", "usage", "--by", "model")["rows"], timeout=15, interval=0.3)
    assert counted, "the refused request was never counted"
    table = gateway.ctl("ctl", "usage", "--by", "model")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()[2:]
    assert rows[0].split("  ")[0] == "(unknown model)" and rows[0].split()[2] == "1", table.stdout
