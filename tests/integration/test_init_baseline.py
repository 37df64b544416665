"""The baseline guardrails `server init` installs, as a user of a new cluster meets them."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.servers import write_config


@pytest.fixture
def new_cluster(servers, engines, tmp_path):
    """A cluster as `server init` sets it up, in front of an echoing sim-engine; guard=… is server.yaml's."""

    def make(guard: dict | None = None):
        engine = engines("qwen", "--echo")
        doc = {"models": [{"name": "qwen", "endpoints": [engine.url]}]}
        if guard is not None:
            doc["guard"] = guard
        server = servers("gw", config=write_config(tmp_path / "server.yaml", doc))
        done = server.init()
        assert done.returncode == 0, done.stderr
        server.init_output = done.stdout
        server.key = next(line.split()[2] for line in done.stdout.splitlines() if "API key" in line)
        server.start()
        server.openai = openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)
        return server

    return make


def test_init_says_it_installed_the_baseline_and_ctl_config_shows_it_on_every_request(new_cluster):
    gw = new_cluster()
    assert "guardrails      the baseline policy on every request" in gw.init_output
    assert f"knowledge bases in the SQLite store ({gw.data_dir}/llmgw.db); each names the model that embeds it" \
        in gw.init_output
    guard = gw.ctl_json("ctl", "config", "get", "guard")["value"]
    assert guard["default"] == ["baseline"]
    baseline = guard["policies"]["baseline"]
    assert baseline["input"]["secrets"] == "block" and baseline["output"]["secrets"] == "block"
    assert baseline["input"]["cards"] == "redact" and baseline["input"]["injection"] == "flag"
    assert baseline["judge"] is None


def test_a_prompt_carrying_an_openai_key_is_refused_by_the_baseline_naming_the_rule(new_cluster):
    gw = new_cluster()
    secret = "sk-" + "T3stK3yAbCdEfGh1" * 3
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=[{"role": "user", "content": f"try {secret}"}])
    assert refused.value.status_code == 400
    assert refused.value.body["code"] == "guardrail_blocked"
    assert "secrets:openai" in refused.value.body["message"]
    assert secret not in refused.value.body["message"]


def test_a_card_number_reaches_the_engine_masked_and_an_ordinary_prompt_is_answered(new_cluster):
    gw = new_cluster()
    ask = [{"role": "user", "content": "charge 4111 1111 1111 1111 please"}]
    echoed = gw.openai.chat.completions.create(model="qwen", messages=ask).choices[0].message.content
    assert echoed.strip() == "charge [CARD_1] please"
    plain = gw.openai.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hello"}])
    assert plain.choices[0].message.content.strip() == "hello"


def test_a_server_yaml_with_policies_of_its_own_is_not_overwritten(new_cluster):
    own = {"default": ["privacy"], "policies": {"privacy": {"input": {"pii": {"email": "redact"}}}}}
    gw = new_cluster(own)
    assert "server.yaml's own policies" in gw.init_output
    guard = gw.ctl_json("ctl", "config", "get", "guard")["value"]
    assert guard["default"] == ["privacy"] and list(guard["policies"]) == ["privacy"]
    # Not under the baseline, the key goes through (the echo shows it reached the engine).
    secret = "sk-" + "T3stK3yAbCdEfGh1" * 3
    answer = gw.openai.chat.completions.create(model="qwen", messages=[{"role": "user", "content": secret}])
    assert answer.choices[0].message.content.strip() == secret
    assert "server.yaml sets guard" not in gw.output()


def test_init_json_says_what_became_of_the_baseline(servers):
    s = servers("cp1")
    done = s.init("--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["guard"] == {"baseline": "installed", "default": ["baseline"], "enabled": True}
