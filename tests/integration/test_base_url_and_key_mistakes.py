"""The two common mistakes of a new client, against a real `llmgw server` with the real SDKs and raw requests:
a base URL without /v1 is told the /v1 path in the API's JSON shape (not the portal's HTML 403 about a form),
and a malformed key is told what is wrong with it (not that keys start sk-llmgw- when it did)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

from tests.support.servers import Server, SimEngine, write_config

CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("mistakes")
    engine = SimEngine(root, "qwen").start()
    server = Server(root, "gw", config=write_config(root / "gw.yaml",
                                                    {"models": [{"name": "qwen", "endpoints": [engine.url]}]}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    server.start()
    yield server
    server.stop()
    engine.stop()


def raw(gateway: Server, method: str, path: str, body: dict | None = None,
        headers: dict | None = None) -> tuple[int, str, dict | str]:
    """One request as a hand-written client sends it: (status, content type, the body read as JSON when it is)."""
    data = None if body is None else json.dumps(body).encode()
    # Header values as UTF-8 bytes, as a client pasting "sk-llmgw-abc123…" sends them.
    request = urllib.request.Request(gateway.client_url + path, data=data, method=method, headers={
        **({"Content-Type": "application/json"} if data else {}),
        **{name: value.encode() for name, value in (headers or {}).items()}})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            status, kind, text = r.status, r.headers.get_content_type(), r.read().decode()
    except urllib.error.HTTPError as e:
        status, kind, text = e.code, e.headers.get_content_type(), e.read().decode()
    return status, kind, json.loads(text) if kind == "application/json" else text


def test_an_openai_client_whose_base_url_lacks_v1_is_told_the_v1_path_in_openais_shape(gateway):
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url, max_retries=0)
    calls = {
        "/v1/chat/completions": lambda: client.chat.completions.create(model="qwen", messages=CHAT, max_tokens=4),
        "/v1/completions": lambda: client.completions.create(model="qwen", prompt="Hi", max_tokens=4),
        "/v1/embeddings": lambda: client.embeddings.create(model="qwen", input="hi"),
        "/v1/responses": lambda: client.responses.create(model="qwen", input="hi", max_output_tokens=16),
        "/v1/models": lambda: client.models.list(),
    }
    for meant, call in calls.items():
        with pytest.raises(openai.NotFoundError) as refused:
            call()
        error = refused.value.body
        assert error["code"] == "not_found", meant
        assert error["message"].startswith(f"there is no {'GET' if meant == '/v1/models' else 'POST'} "
                                           f"{meant[3:]} here: this gateway's API is under /v1, so the call is ")
        assert meant in error["message"] and f"give the client the base URL {gateway.client_url}/v1" in error["message"]
    # What it was told to do works.
    fixed = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    assert fixed.chat.completions.create(model="qwen", messages=CHAT, max_tokens=4).choices


@pytest.mark.parametrize(("method", "path"), [("POST", "/chat/completions"), ("POST", "/completions"),
                                              ("POST", "/embeddings"), ("POST", "/responses"), ("GET", "/models"),
                                              ("GET", "/files/file-abc"), ("POST", "/batches")])
def test_a_raw_json_call_without_v1_gets_a_json_404_naming_the_v1_path_not_the_portals_page(gateway, method, path):
    body = {"model": "qwen", "messages": CHAT} if method == "POST" else None
    status, kind, doc = raw(gateway, method, path, body, {"Authorization": f"Bearer {gateway.key}"})
    assert (status, kind) == (404, "application/json"), doc
    assert doc["error"]["type"] == "not_found_error" and doc["error"]["code"] == "not_found"
    assert f"/v1{path}" in doc["error"]["message"]
    assert "form" not in doc["error"]["message"]


def test_a_messages_call_without_v1_is_answered_in_anthropics_shape_with_both_base_urls(gateway):
    status, kind, doc = raw(gateway, "POST", "/messages", {"model": "qwen", "max_tokens": 4, "messages": CHAT},
                            {"x-api-key": gateway.key})
    assert (status, kind) == (404, "application/json")
    assert doc["type"] == "error" and doc["error"]["type"] == "not_found_error"
    assert "POST /v1/messages" in doc["error"]["message"]
    assert f"Anthropic's SDK adds /v1 itself and wants base_url={gateway.client_url}" in doc["error"]["message"]
    # Anthropic's own SDK, given the base URL it wants, is answered.
    client = anthropic.Anthropic(api_key=gateway.key, base_url=gateway.client_url, max_retries=0)
    assert client.messages.create(model="qwen", max_tokens=8, messages=CHAT).content


def test_the_portals_pages_are_still_the_portals(gateway):
    status, kind, _ = raw(gateway, "GET", "/chat")
    assert (status, kind) == (200, "text/html")  # the sign-in page it sends a stranger to
    # /v1/workflows without /v1 is the portal's Workflows page; its runs without /v1 are still told the path.
    status, kind, _ = raw(gateway, "GET", "/workflows")
    assert (status, kind) == (200, "text/html")
    status, kind, doc = raw(gateway, "POST", "/workflows/runs", {"model": "qwen"})
    assert (status, kind) == (404, "application/json") and "POST /v1/workflows/runs" in doc["error"]["message"]
    status, kind, _ = raw(gateway, "GET", "/no-such-page")
    assert (status, kind) == (404, "text/html")


def test_a_key_cut_short_is_told_it_is_too_short_by_the_sdk(gateway):
    client = openai.OpenAI(api_key=gateway.key[:-6], base_url=gateway.client_url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        client.models.list()
    message = refused.value.body["message"]
    assert message == ("the key is too short: sk-llmgw- is followed by 37 letters and digits where a key has 43; "
                       "copy it again, whole")
    assert gateway.key[9:-6] not in message


@pytest.mark.parametrize(("presented", "said"), [
    ("{key}xyz", "the key is too long: sk-llmgw- is followed by 46 letters and digits"),
    ("Bearer {key}", 'the key starts with a second "Bearer "'),
    ('"{key}"', "the key is in quotes: send it without them"),
    ("{shown}…", "that is a key's shown prefix, as llmgw keys list prints it, not the key"),
    ("{dotted}", "the key has characters an llmgw key never has ('.')"),
    ("sk-proj-abc123", "that is not an llmgw API key: it starts sk-proj-, another service's key perhaps"),
])
def test_a_malformed_key_is_told_what_is_wrong_with_it(gateway, presented, said):
    key = gateway.key
    text = presented.format(key=key, shown=key[:15], dotted=key[:20] + "." + key[21:])
    status, _, doc = raw(gateway, "POST", "/v1/chat/completions", {"model": "qwen", "messages": CHAT},
                         {"Authorization": f"Bearer {text}"})
    assert status == 401 and doc["error"]["code"] == "invalid_api_key"
    assert doc["error"]["message"].startswith(said), doc["error"]["message"]
    assert key[15:] not in doc["error"]["message"]
