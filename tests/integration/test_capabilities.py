"""Models say what they can do, with a real llmgw server and real sim-engines: /v1/models shows it,
and a request for anything else is refused with a sentence before the engine is asked (issue 11, item 2)."""

from __future__ import annotations

import anthropic
import openai
import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.servers import breaker_state, serving_with_first_key, write_config
from tests.support.waiting import wait_for

CHAT = [{"role": "user", "content": "Say something."}]
PICTURE = [{"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]


@pytest.fixture
def gateway(servers, tmp_path):
    def make(models: list[dict], **cluster):
        server = servers("gw", config=write_config(tmp_path / "gw.yaml", {"models": models, **cluster}))
        return serving_with_first_key(server)

    return make


def prompt_tokens_read(engine) -> float:
    """The prompt tokens the sim-engine has read, from its own metrics: 0 when no request reached it."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in engine.metrics().splitlines()
               if line.startswith("vllm:prompt_tokens_total"))


def test_models_list_what_each_can_do_as_set_or_all_but_workflows_when_not_set(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "capabilities": ["completions", "chat"]},
                  {"name": "other", "endpoints": [engine.url]}])
    listed = {m.id: m.model_extra["capabilities"] for m in gw.openai.models.list().data}
    assert listed == {"qwen": ["chat", "completions"],
                      "other": ["chat", "completions", "embeddings", "vision", "tools", "thinking", "images"]}


def test_embeddings_to_a_chat_model_are_refused_with_what_it_does_and_chat_still_answers(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "capabilities": ["chat", "completions"]}],
                 router={"breaker": {"failures": 2, "open_for": "1m"}, "retries": 0})
    for _ in range(4):  # twice what opens the breaker
        with pytest.raises(openai.BadRequestError) as refused:
            gw.openai.embeddings.create(model="qwen", input="hello")
        assert refused.value.body["code"] == "unsupported_capability"
        assert refused.value.body["message"].startswith("qwen does chat and completions, not embeddings; ")
    assert prompt_tokens_read(engine) == 0
    assert gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=2).choices[0].message.content
    assert breaker_state(gw) == "closed"


def test_an_image_tools_or_thinking_a_model_does_not_do_are_refused_in_the_clients_shape(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "capabilities": ["chat"]}])
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=PICTURE, max_tokens=2)
    assert refused.value.body["message"].startswith("qwen does chat, not vision; ")
    tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=CHAT, tools=[tool], max_tokens=2)
    assert refused.value.body["message"].startswith("qwen does chat, not tools; ")
    with pytest.raises(anthropic.BadRequestError) as refused:
        gw.anthropic.messages.create(model="qwen", max_tokens=2048, messages=CHAT,
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["message"].startswith("qwen does chat, not thinking; ")
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.completions.create(model="qwen", prompt="Once", max_tokens=2)
    assert refused.value.body["message"].startswith("qwen does chat, not completions; ")
    assert gw.anthropic.messages.create(model="qwen", max_tokens=2, messages=CHAT).content


def test_an_engine_refusing_with_501_leaves_the_breaker_closed_and_the_model_answering(gateway, engines):
    # A model with no capabilities set passes everything on: the engine's own
    # 501 is the client's answer, and says nothing about the replica's health.
    engine = engines("qwen", "--fail-on", "unsupported=501")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"breaker": {"failures": 2, "open_for": "1m"}, "retries": 0})
    # From two keys: one key's failures alone never open a breaker (test_breakers.py).
    made = gw.ctl_json("keys", "create", "second", "--project", "Default/default/default")
    second = openai.OpenAI(api_key=made["key"], base_url=gw.client_url + "/v1", max_retries=0)
    for asker in (gw.openai, second, gw.openai, second):
        with pytest.raises(openai.APIStatusError) as failed:
            asker.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "unsupported"}],
                                              max_tokens=1)
        assert failed.value.status_code == 501
    assert gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=2).choices
    assert breaker_state(gw) == "closed"


def test_a_catalog_model_says_what_it_does_and_its_replica_is_never_asked_for_the_rest(server, tmp_path):
    # A sim replica placed by the catalog, declared chat-only: the engine itself would answer embeddings.
    (tmp_path / "engines").mkdir()
    agent = AgentProcess(tmp_path, "node-a").join(server, engines_dir=tmp_path / "engines")
    agent.start()
    try:
        for doc in ({"name": "talk", "capabilities": ["chat", "completions"],
                     "profiles": [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]},
                    {"name": "qwen", "source": "/models/qwen.gguf", "scaling": {"min": 0, "on_demand": {}},
                     "profiles": [{"engine": "llamacpp", "cpu_cores": 1, "memory": "1GB"}]}):
            path = tmp_path / f"{doc['name']}.yaml"
            path.write_text(yaml.safe_dump(doc))
            done = server.ctl("ctl", "model", "add", "-f", str(path))
            assert done.returncode == 0, done.stdout + done.stderr
        client = openai.OpenAI(api_key=server.first_key, base_url=server.client_url + "/v1", max_retries=0)

        def ready():
            try:
                return client.chat.completions.create(model="talk", messages=CHAT, max_tokens=2).choices
            except openai.APIStatusError:
                return None
        wait_for(ready, timeout=60, interval=0.5)
        listed = {m.id: m.model_extra["capabilities"] for m in client.models.list().data}
        assert listed == {"talk": ["chat", "completions"], "qwen": ["chat", "completions", "tools", "thinking"]}
        for model in ("talk", "qwen"):
            with pytest.raises(openai.BadRequestError) as refused:
                client.embeddings.create(model=model, input="hello")
            assert refused.value.body["code"] == "unsupported_capability"
        assert refused.value.body["message"].startswith("qwen does chat, completions, tools and thinking, "
                                                        "not embeddings; ")
        assert client.chat.completions.create(model="talk", messages=CHAT, max_tokens=2).choices[0].message.content
        assert {m["name"]: m["capabilities"] for m in server.ctl_json("ctl", "models")} == listed
        shown = server.ctl("ctl", "model", "show", "qwen")
        assert "capabilities: chat, completions, tools, thinking\n" in shown.stdout, shown.stdout
        # The on-demand llama.cpp model was not loaded to be asked: a refusal asks for no replica.
        assert all(r["model"] != "qwen" for r in server.ctl_json("ctl", "replicas", "--all"))
    finally:
        agent.stop(stop_engines=True)
