"""The client API with the real SDKs, a real llmgw server and real sim-engines on loopback."""

from __future__ import annotations

import json
import signal
import threading
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

from tests.support.servers import serving_with_first_key, write_config
from tests.support.waiting import wait_for, wait_until


@pytest.fixture
def gateway(servers, tmp_path):
    """gateway(models, **cluster) -> a running server whose first key is `.key`."""

    def make(models: list[dict], name: str = "gw", **cluster) -> object:
        config = write_config(tmp_path / f"{name}.yaml", {"models": models, **cluster})
        server = servers(name, config=config)
        return serving_with_first_key(server)

    return make


def post(server, path: str, body: bytes | dict, key: str | None = None, headers: dict | None = None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.client_url + path, data=data, method="POST", headers={
        "Authorization": f"Bearer {key or server.key}", "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def usage_rows(server, expect: int, timeout: float = 10):
    """The usage rows once `expect` of them have been written."""
    def rows():
        got = server.ctl_json("ctl", "usage", "--by", "model")
        total = sum(r["requests"] for r in got["rows"])
        return got if total >= expect else None
    got, _ = wait_for(rows, timeout=timeout, interval=0.3)
    return got


CHAT = [{"role": "user", "content": "Say something."}]


def provider_key(path, key: str) -> None:
    """A provider's key file as llmgw takes one: the key alone, readable by its owner only."""
    path.write_text(key + "\n")
    path.chmod(0o600)


def test_chat_answers_streamed_and_not_and_counts_tokens(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "context_length": 32768}])
    answer = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=5)
    assert answer.choices[0].message.content.split() == ["the", "quick", "brown", "fox", "jumps"]
    assert answer.usage.completion_tokens == 5
    chunks = list(gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=4, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split() == [
        "the", "quick", "brown", "fox"]
    assert all(c.usage is None for c in chunks)  # not asked for, not given
    counted = list(gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=4, stream=True,
                                                     stream_options={"include_usage": True}))
    assert counted[-1].usage.completion_tokens == 4
    models = gw.openai.models.list().data
    assert [(m.id, m.context_length) for m in models] == [("qwen", 32768)]


def test_completions_and_embeddings_answer_through_the_gateway(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    text = gw.openai.completions.create(model="qwen", prompt="Once", max_tokens=3)
    assert text.choices[0].text.split() == ["the", "quick", "brown"]
    first = gw.openai.embeddings.create(model="qwen", input=["a", "b"])
    again = gw.openai.embeddings.create(model="qwen", input="a")
    assert len(first.data) == 2 and first.data[0].embedding == again.data[0].embedding


def test_the_responses_api_answers_as_codex_reads_it(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    answer = gw.openai.responses.create(model="qwen", instructions="Be brief.", input="Hello")
    assert answer.status == "completed" and answer.output_text.startswith(" the quick")
    with gw.openai.responses.stream(model="qwen", input="Hello") as stream:
        final = stream.get_final_response()
    assert final.output_text == answer.output_text
    tools = [{"type": "function", "name": "lookup", "description": "find",
              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
    called = gw.openai.responses.create(model="qwen", input="Find it", tools=tools)
    call = next(item for item in called.output if item.type == "function_call")
    assert call.name == "lookup" and json.loads(call.arguments) == {"q": "x"}


def test_anthropic_messages_answer_with_thinking_and_tools(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    message = gw.anthropic.messages.create(model="qwen", max_tokens=64, messages=CHAT)
    assert message.content[0].type == "text" and message.stop_reason == "end_turn"
    with gw.anthropic.messages.stream(model="qwen", max_tokens=64, messages=CHAT,
                                      thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking.strip()
    tools = [{"name": "weather", "description": "the weather",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    used = gw.anthropic.messages.create(model="qwen", max_tokens=64, messages=CHAT, tools=tools)
    assert used.stop_reason == "tool_use"
    assert used.content[-1].type == "tool_use" and used.content[-1].input == {"city": "x"}


def test_max_tokens_above_the_models_longest_answer_is_refused_with_a_sentence(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "max_output_tokens": 100}])
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=101)
    assert refused.value.body["message"] == (
        "max_tokens 101 is more than qwen's longest answer, 100 tokens; ask for 100 or fewer")
    with pytest.raises(anthropic.BadRequestError) as refused:
        gw.anthropic.messages.create(model="qwen", max_tokens=500, messages=CHAT)
    assert "longest answer, 100 tokens" in refused.value.message


def test_bad_requests_get_the_right_status_and_a_sentence(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}, {"name": "other", "endpoints": [engine.url]}])
    status, headers, body = post(gw, "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid_json" and headers["x-request-id"]
    record, _ = wait_for(lambda: _request(gw, headers["x-request-id"]), timeout=10, interval=0.2)
    assert record["status"] == 400 and record["detail"]["error"] == "invalid_json"
    status, _, body = post(gw, "/v1/chat/completions", {"model": "qwen", "messages": []})
    assert status == 400 and body["error"]["message"] == '"messages" must be a non-empty list of messages'
    status, _, body = post(gw, "/v1/chat/completions", {"model": "qwen", "messages": CHAT, "stream": "yes"})
    assert status == 400 and body["error"]["param"] == "stream"
    status, _, body = post(gw, "/v1/chat/completions", {"model": "nope", "messages": CHAT})
    assert status == 404 and "there is no model nope here" in body["error"]["message"]
    status, _, body = post(gw, "/v1/chat/completions", b"[" + b"1," * (20 * 1024 * 1024) + b"1]")
    assert status == 413 and "32 MB" in body["error"]["message"]
    made = gw.ctl_json("keys", "create", "narrow", "--project", "Demo/dev/app", "--create")
    gw.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--models", "qwen")
    status, _, body = post(gw, "/v1/chat/completions", {"model": "other", "messages": CHAT}, key=made["key"])
    assert status == 403 and body["error"]["code"] == "model_not_allowed"


def test_a_key_over_its_rpm_is_refused_with_when_to_try_again(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    made = gw.ctl_json("keys", "create", "slow", "--project", "Demo/dev/app", "--create")
    gw.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", "3")
    client = openai.OpenAI(api_key=made["key"], base_url=gw.client_url + "/v1", max_retries=0)
    for _ in range(3):
        client.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
    assert refused.value.body["code"] == "rate_limited"
    assert 1 <= int(refused.value.response.headers["Retry-After"]) <= 60


def test_a_team_budget_binds_every_key_under_it_and_survives_a_restart(gateway, engines, servers):
    engine = engines("qwen")
    # 1,000,000 micro-units (1.00) a thousand answer tokens: each 10-token answer costs 0.01.
    gw = gateway([{"name": "qwen", "endpoints": [engine.url], "price": {"completion_per_1k": 1_000_000}}])
    first = gw.ctl_json("keys", "create", "a", "--project", "Acme/ml/one", "--create")
    second = gw.ctl_json("keys", "create", "b", "--project", "Acme/ml/two", "--create")
    gw.ctl_json("keys", "limits", "--scope", "team", "--id", "Acme/ml", "--budget", "0.03", "--period", "day")
    a = openai.OpenAI(api_key=first["key"], base_url=gw.client_url + "/v1", max_retries=0)
    b = openai.OpenAI(api_key=second["key"], base_url=gw.client_url + "/v1", max_retries=0)
    a.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10)
    a.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10)
    b.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10)
    with pytest.raises(openai.APIStatusError) as refused:
        b.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10)
    assert refused.value.status_code == 402
    assert refused.value.body["code"] == "budget_exceeded"
    assert "the team Acme/ml" in refused.value.body["message"]
    assert gw.stop() == 0
    gw.start()
    with pytest.raises(openai.APIStatusError) as again:
        a.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10)
    assert again.value.status_code == 402


def test_a_provider_key_at_its_limit_is_passed_over_and_its_breaker_shows_open(gateway, engines, tmp_path):
    provider = engines("gpt", "--api-key", "sk-good", "--api-key", "sk-limited", "--refuse-key", "sk-limited=429")
    provider_key(tmp_path / "k1", "sk-limited")
    provider_key(tmp_path / "k2", "sk-good")
    gw = gateway([{"name": "gpt", "source": "external", "external": {
        "url": provider.url, "allow_private_targets": True,
        "api_key_files": [{"file": str(tmp_path / "k1")}, {"file": str(tmp_path / "k2")}]}}])
    for n in range(20):
        # A new conversation each time, so session affinity spreads them over both keys.
        ask = [{"role": "user", "content": f"Question {n}"}]
        answer = gw.openai.chat.completions.create(model="gpt", messages=ask, max_tokens=2)
        assert answer.choices[0].message.content
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.ports['metrics']}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert 'llmgw_breaker_state{endpoint="external:gpt#1",model="gpt"} 2.0' in metrics
    assert 'llmgw_breaker_state{endpoint="external:gpt#2",model="gpt"} 0.0' in metrics
    assert "sk-limited" not in metrics and "sk-good" not in gw.output()


def test_a_dead_replica_is_retried_on_another_before_the_first_byte(gateway, engines):
    from tests.support.pgcluster import free_port

    live = engines("qwen")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gw = gateway([{"name": "qwen", "endpoints": [dead, live.url]}])
    asked = []
    for _ in range(10):
        # The batch profile weighs only the queue, which is empty at both, so the replicas take turns at being
        # first. Under chat the live one's known-empty KV cache beats the dead one's unknown one once the
        # gateway has read the live one's metrics, and the dead one was then never tried at all.
        raw = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, max_tokens=1,
                                                                  extra_headers={"x-llmgw-profile": "batch"})
        assert raw.parse().choices
        asked.append(raw.headers["x-request-id"])

    def written():
        rows = gw.ctl_json("ctl", "requests", "--model", "qwen")["rows"]
        return rows if {row["id"] for row in rows} >= set(asked) else None

    rows = wait_until(written, timeout=15, what="the usage rows of the ten requests were written", interval=0.3)
    assert all(row["status"] == 200 for row in rows)
    # The requests that were sent to the dead replica first say so in their usage row, and were answered anyway.
    retried = [row["detail"]["retries"] for row in rows if row["detail"].get("retries")]
    assert retried, [row["detail"] for row in rows]
    assert all([tried["endpoint"] for tried in tries] == [dead] for tries in retried)


def test_a_stream_cut_by_the_engine_ends_with_an_error_and_the_usage_row_says_so(gateway, engines):
    engine = engines("qwen", "--cut-after", "3")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    stream = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10, stream=True)
    with pytest.raises(openai.APIError) as cut:
        for _ in stream:
            pass
    assert "stopped before the answer was complete" in str(cut.value)
    request_id = stream.response.headers["x-request-id"]
    record, _ = wait_for(lambda: _request(gw, request_id), timeout=10, interval=0.2)
    assert record["status"] == 502 and record["detail"]["error"] == "upstream_cut"


def _request(gw, request_id):
    done = gw.ctl("ctl", "request", request_id, "--json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_an_engine_that_hangs_is_given_up_on_with_504(gateway, engines):
    engine = engines("qwen", "--hang")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"timeouts": {"first_byte": "1s"}, "retries": 0})
    with pytest.raises(openai.APIStatusError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=CHAT)
    assert refused.value.status_code == 504
    assert refused.value.body["code"] == "upstream_timeout"


def test_a_full_model_queues_by_band_and_past_the_queue_ttl_answers_504_with_retry_after(gateway, engines):
    engine = engines("qwen", "--tokens-per-second", "5")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}],
                 router={"admission": {"saturation": 1, "queue_ttl": "500ms"}})
    slow = threading.Thread(target=lambda: gw.openai.chat.completions.create(
        model="qwen", messages=CHAT, max_tokens=15))
    slow.start()
    wait_until(lambda: 'vllm:num_requests_running{model_name="qwen"} 1.0' in engine.metrics(), timeout=15,
               what="the slow request reached the engine, filling the model")
    with pytest.raises(openai.APIStatusError) as refused:
        gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=1)
    slow.join()
    assert refused.value.status_code == 504 and refused.value.body["code"] == "queue_timeout"
    assert int(refused.value.response.headers["Retry-After"]) >= 1


def test_a_fallback_answers_when_the_model_has_no_room(gateway, engines):
    from tests.support.pgcluster import free_port

    spare = engines("small")
    gw = gateway([{"name": "big", "endpoints": [f"http://127.0.0.1:{free_port()}/v1"], "fallbacks": ["small"]},
                  {"name": "small", "endpoints": [spare.url]}],
                 router={"breaker": {"failures": 1, "open_for": "1m"}, "retries": 0})
    with pytest.raises(openai.APIStatusError):
        gw.openai.chat.completions.create(model="big", messages=CHAT, max_tokens=1)  # trips big's breaker
    answer = gw.openai.chat.completions.create(model="big", messages=CHAT, max_tokens=1)
    assert answer.model == "small"


def test_a_client_that_goes_away_cancels_the_engines_work(gateway, engines):
    engine = engines("qwen", "--tokens-per-second", "10")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    stream = gw.openai.chat.completions.create(model="qwen", messages=CHAT, max_tokens=200, stream=True)
    next(iter(stream))
    assert 'vllm:num_requests_running{model_name="qwen"} 1' in engine.metrics()
    stream.close()
    gone, _ = wait_for(lambda: 'vllm:num_requests_running{model_name="qwen"} 0' in engine.metrics(), timeout=10)
    assert gone


def test_every_answer_carries_a_request_id_that_ctl_request_explains(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    raw = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, max_tokens=2)
    request_id = raw.headers["x-request-id"]
    record, _ = wait_for(lambda: _request(gw, request_id), timeout=10, interval=0.2)
    assert record["endpoint"] == engine.url and record["status"] == 200
    assert record["completion_tokens"] == 2
    status, headers, _ = post(gw, "/v1/chat/completions", {"model": "qwen"}, key="sk-llmgw-" + "x" * 43)
    assert status == 401 and headers["x-request-id"].startswith("req_")


def test_usage_rows_of_many_requests_are_all_written_by_sigterm(gateway, engines):
    import asyncio

    import aiohttp

    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}])
    n = 10_000

    async def load():
        headers = {"Authorization": f"Bearer {gw.key}"}
        body = {"model": "qwen", "messages": CHAT, "max_tokens": 1}
        async with aiohttp.ClientSession() as session:
            sem = asyncio.Semaphore(32)

            async def one():
                async with sem:
                    async with session.post(gw.client_url + "/v1/chat/completions", json=body,
                                            headers=headers) as r:
                        assert r.status == 200
                        await r.read()

            await asyncio.gather(*(one() for _ in range(n)))

    asyncio.run(load())
    gw.signal(signal.SIGTERM)
    gw.proc.wait(timeout=60)
    gw.start()
    summary = gw.ctl_json("ctl", "usage", "--by", "model")
    row = next(r for r in summary["rows"] if r["group"] == "qwen")
    assert row["requests"] == n
    assert row["completion_tokens"] == n


def test_a_provider_key_refused_with_401_is_passed_over_and_named_but_never_shown(gateway, engines, tmp_path):
    provider = engines("gpt", "--api-key", "sk-good")
    provider_key(tmp_path / "k1", "sk-revoked-by-provider")
    provider_key(tmp_path / "k2", "sk-good")
    gw = gateway([{"name": "gpt", "source": "external", "external": {
        "url": provider.url, "allow_private_targets": True,
        "api_key_files": [{"file": str(tmp_path / "k1")}, {"file": str(tmp_path / "k2")}]}}])
    for n in range(10):
        ask = [{"role": "user", "content": f"Question {n}"}]
        assert gw.openai.chat.completions.create(model="gpt", messages=ask, max_tokens=1).choices
    log = gw.output()
    assert "external_key_refused: external:gpt#1 refused its key" in log
    assert "sk-revoked-by-provider" not in log and "sk-good" not in log


def test_a_rotated_key_file_is_read_again_and_a_missing_one_leaves_its_endpoint_out(gateway, engines, tmp_path):
    provider = engines("gpt", "--api-key", "sk-new")
    key_file = tmp_path / "key"
    provider_key(key_file, "sk-old")
    gw = gateway([{"name": "gpt", "source": "external", "external": {"url": provider.url,
                                                                      "allow_private_targets": True,
                                                                      "api_key_file": str(key_file)}}],
                 router={"breaker": {"open_for": "1s"}})
    with pytest.raises(openai.APIStatusError) as refused:
        gw.openai.chat.completions.create(model="gpt", messages=CHAT, max_tokens=1)
    assert refused.value.status_code == 502 and refused.value.body["code"] == "external_key_refused"
    key_file.write_text("sk-new\n")

    def answered():
        try:
            return bool(gw.openai.chat.completions.create(model="gpt", messages=CHAT, max_tokens=1).choices)
        except openai.APIStatusError:
            return False

    ok, _ = wait_for(answered, timeout=15, interval=0.5)
    assert ok
    key_file.unlink()
    left_out, _ = wait_for(lambda: not answered(), timeout=15, interval=0.5)
    assert left_out
    assert f"the provider key in {key_file} cannot be read" in gw.output()


def test_a_project_with_the_cache_on_gets_the_same_answer_again_without_the_engine(gateway, engines):
    engine = engines("qwen")
    gw = gateway([{"name": "qwen", "endpoints": [engine.url]}], router={"cache": {"read_every": "100ms"}})
    assert gw.ctl("keys", "cache", "--project", "Default/default/default", "--ttl", "1h").returncode == 0
    wait_until(lambda: gw.metric("llmgw_cache_projects") == 1, timeout=15,
               what="the gateway read the project's cache setting (llmgw_cache_projects 1)")
    first = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, temperature=0)
    again = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, temperature=0)
    assert "x-llmgw-cache" not in first.headers
    assert again.headers["x-llmgw-cache"] == "hit" and int(again.headers["Age"]) >= 0
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    streamed = gw.openai.chat.completions.create(model="qwen", messages=CHAT, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
        first.parse().choices[0].message.content
    other = gw.openai.chat.completions.with_raw_response.create(model="qwen", messages=CHAT, temperature=0.5)
    assert "x-llmgw-cache" not in other.headers
    row, _ = wait_for(lambda: _request(gw, again.headers["x-request-id"]), timeout=10, interval=0.2)
    assert row["cache"] == "hit" and row["completion_tokens"] == 0 and row["cost_micros"] == 0
