"""Traces as a collector receives them: a real `llmgw server` and `llmgw agent` exporting over OTLP/HTTP.

One gateway for the module, in front of a sim-engine that echoes the
prompt's own words (so the answer's words are as distinctive as the
prompt's) and logs the headers it is sent, with `telemetry.otlp_endpoint`
pointed at a receiver in this process (tests/support/otlp.py) and
`sample_ratio: 1`. Clients are the openai and anthropic SDKs, sending their
own W3C traceparent where a test says so. Every test ends by scanning every
span the receiver ever got for the words asked and answered.
"""

from __future__ import annotations

import json
import re
import secrets

import anthropic
import openai
import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.servers import Server, SimEngine, write_config
from tests.support.waiting import wait_until

PROJECT = "Default/default/default"
# Words no span name, attribute or llmgw code could hold by chance; the sim's --echo answers with them too.
WORDS = ["periwinkle", "xylophone", "quokka", "marzipan", "zeppelin", "kumquat"]
asked: set[str] = set()  # every word sent in this module, for the scan at each test's end


@pytest.fixture(scope="module")
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, receiver):
    root = tmp_path_factory.mktemp("traces")
    with pytest.MonkeyPatch.context() as env:
        # The batch processor sends every 100 ms rather than every 5 s: the test waits on spans, not a clock.
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        engine = SimEngine(root, "sim", "--echo", "--log-headers", str(root / "headers.jsonl")).start()
        config = write_config(root / "server.yaml", {
            "models": [{"name": "sim", "endpoints": [engine.url]}],
            "router": {"cache": {"read_every": "100ms"}},
            "telemetry": {"otlp_endpoint": receiver.url, "sample_ratio": 1.0}})
        server = Server(root, "gw", config=config)
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.key = json.loads(done.stdout)["key"]["key"]
        server.start()
        server.engine, server.root = engine, root
        agent = None
        try:
            server.ctl_json("keys", "cache", "--project", PROJECT, "--ttl", "1h")
            wait_until(lambda: server.metric("llmgw_cache_projects") == 1, timeout=15,
                       what="the gateway read the project's cache setting")
            server.agent = agent = AgentProcess(root, "node-t").join(server, telemetry={
                "otlp_endpoint": receiver.url, "sample_ratio": 0.0})
            agent.start()
            # One traced request before any test, so that the scan at each test's end always has spans to
            # read, whichever test comes first: the one that turns tracing off sends none of its own.
            openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0).chat.completions \
                .create(model="sim", messages=[{"role": "user", "content": prompt()}])
            receiver.wait_for(lambda spans: spans, what="the first request's spans")
            yield server
        finally:
            if agent is not None:
                agent.stop(stop_engines=True)
            server.stop()
            engine.stop()
    assert "Traceback" not in server.output()


@pytest.fixture(autouse=True)
def no_span_holds_what_was_asked_or_answered(receiver):
    yield
    spans = receiver.received()
    assert spans
    for span in spans:
        said = " ".join(span.texts()).lower()
        found = [w for w in asked if w in said]
        assert not found, f"the span {span.name!r} of {span.service} holds {found}: {span}"


def prompt(n: int = 3) -> str:
    """A prompt of distinctive words, with a fresh one in it so that no two requests are the same."""
    fresh = "tok" + secrets.token_hex(4)
    words = [*secrets.SystemRandom().sample(WORDS, n), fresh]
    asked.update(w.lower() for w in words)
    return "Tell me of the " + " ".join(words)


def traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, parent, f"00-{trace_id}-{parent}-01"


def in_trace(receiver: OtlpReceiver, trace_id: str, *names: str) -> dict[str, list[ReceivedSpan]]:
    """The trace's spans by name, once every one of `names` is among them."""
    def found(spans):
        mine = [s for s in spans if s.trace_id == trace_id]
        return mine if all(any(s.name == n for s in mine) for n in names) else None

    by_name: dict[str, list[ReceivedSpan]] = {}
    for span in receiver.wait_for(found, what=f"{', '.join(names)} in the trace {trace_id}"):
        by_name.setdefault(span.name, []).append(span)
    return by_name


def engine_traceparents(gateway) -> list[str]:
    path = gateway.root / "headers.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["headers"].get("traceparent", "") for line in lines]


def test_a_chat_completion_is_traced_in_the_clients_trace_with_the_genai_attributes(gateway, receiver):
    trace_id, parent, header = traceparent()
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0,
                           default_headers={"traceparent": header})
    reply = client.chat.completions.create(model="sim", messages=[{"role": "user", "content": prompt()}],
                                           max_tokens=64, temperature=0.5, top_p=0.9, user="ticket-4711")
    asked.update(w.lower() for w in re.findall(r"\w{4,}", reply.choices[0].message.content or ""))
    spans = in_trace(receiver, trace_id, "chat sim", "upstream", "guard input", "guard output", "cache lookup")
    [request] = spans["chat sim"]
    assert request.parent_span_id == parent and request.service == "llmgw-server"
    attributes = request.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert (attributes["gen_ai.request.model"], attributes["gen_ai.response.model"]) == ("sim", "sim")
    assert (attributes["gen_ai.request.max_tokens"], attributes["gen_ai.request.temperature"],
            attributes["gen_ai.request.top_p"]) == (64, 0.5, 0.9)
    assert attributes["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens > 0
    assert attributes["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens > 0
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 0
    assert attributes["gen_ai.conversation.id"].startswith("user:")  # a digest of what the client named
    assert attributes["gen_ai.response.id"] == reply.id
    assert attributes["http.response.status_code"] == 200
    [upstream] = spans["upstream"]
    assert upstream.parent_span_id == request.span_id
    assert upstream.attributes["gen_ai.provider.name"] == "openai_compatible"  # an endpoint llmgw did not start
    assert upstream.attributes["server.port"] == gateway.engine.port
    for step in ("guard input", "guard output", "cache lookup"):
        assert [s.parent_span_id for s in spans[step]] == [request.span_id], step
    assert spans["guard input"][0].attributes["llmgw.guard.outcome"] == "passed"
    assert spans["cache lookup"][0].attributes["llmgw.cache.result"] == "miss"
    # The engine was sent the attempt's own place in the client's trace.
    assert f"00-{trace_id}-{upstream.span_id}-01" in engine_traceparents(gateway)


def test_the_same_question_again_is_a_cache_hit_with_no_upstream_attempt(gateway, receiver):
    question = prompt()
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0)
    client.chat.completions.create(model="sim", messages=[{"role": "user", "content": question}])
    trace_id, _, header = traceparent()
    again = client.chat.completions.with_raw_response.create(
        model="sim", messages=[{"role": "user", "content": question}], extra_headers={"traceparent": header})
    assert again.headers.get("x-llmgw-cache") == "hit"
    spans = in_trace(receiver, trace_id, "chat sim", "cache lookup")
    assert spans["cache lookup"][0].attributes["llmgw.cache.result"] == "hit"
    assert spans["chat sim"][0].attributes["llmgw.cache"] == "hit"
    assert "upstream" not in spans


def test_a_prompt_the_guard_refuses_is_traced_as_blocked_without_its_words(gateway, receiver):
    trace_id, _, header = traceparent()
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0,
                           default_headers={"traceparent": header})
    planted = "sk-" + "Tr4c3sN0tR3alK3y" * 3  # an OpenAI key's shape, which the baseline blocks
    asked.add(planted.lower())
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim", messages=[{"role": "user", "content": f"{prompt()} {planted}"}])
    assert refused.value.code == "guardrail_blocked"
    spans = in_trace(receiver, trace_id, "chat sim", "guard input")
    assert spans["guard input"][0].attributes["llmgw.guard.outcome"] == "blocked"
    assert spans["chat sim"][0].attributes["http.response.status_code"] == 400
    assert spans["chat sim"][0].attributes["error.type"] == "guardrail_blocked"
    assert "upstream" not in spans


def test_completions_embeddings_and_anthropic_messages_are_named_by_their_operation(gateway, receiver):
    trace_id, _, header = traceparent()
    headers = {"traceparent": header}
    client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0,
                           default_headers=headers)
    client.completions.create(model="sim", prompt=prompt(), max_tokens=4)
    client.embeddings.create(model="sim", input=prompt())
    claude = anthropic.Anthropic(api_key=gateway.key, base_url=gateway.client_url, max_retries=0,
                                 default_headers=headers)
    with claude.messages.stream(model="sim", max_tokens=8, messages=[{"role": "user", "content": prompt()}]) as s:
        answer = s.get_final_text()
    asked.update(w.lower() for w in re.findall(r"\w{4,}", answer))
    spans = in_trace(receiver, trace_id, "text_completion sim", "embeddings sim", "chat sim")
    assert spans["text_completion sim"][0].attributes["gen_ai.operation.name"] == "text_completion"
    assert spans["embeddings sim"][0].attributes["gen_ai.operation.name"] == "embeddings"
    message = spans["chat sim"][0].attributes
    assert (message["llmgw.api"], message["llmgw.stream"], message["gen_ai.request.max_tokens"]) == \
        ("messages", True, 8)
    assert message["gen_ai.usage.output_tokens"] > 0
    assert len(spans["upstream"]) == 3


def test_bad_telemetry_settings_are_refused_with_a_sentence(gateway):
    done = gateway.ctl("ctl", "config", "set", "telemetry.sample_ratio", "2")
    assert done.returncode == 1
    assert "telemetry.sample_ratio: must be from 0 to 1" in done.stderr
    done = gateway.ctl("ctl", "config", "set", "telemetry.otlp_endpoint", "collector:4318")
    assert done.returncode == 1
    assert "telemetry.otlp_endpoint: expected an OTLP/HTTP collector's URL" in done.stderr


def test_a_replica_start_is_one_trace_from_the_leaders_decision_to_the_nodes_engine_loading(gateway, receiver,
                                                                                            tmp_path):
    wait_until(lambda: gateway.ctl_json("ctl", "nodes"), timeout=30, what="the agent joined the cluster")
    model = tmp_path / "simmy.yaml"
    model.write_text(yaml.safe_dump({"name": "simmy", "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                    "memory": "256MB"}]}))
    done = gateway.ctl("ctl", "model", "add", "-f", str(model))
    assert done.returncode == 0, done.stdout + done.stderr

    def started(spans):
        return [s for s in spans if s.name == "replica start" and s.attributes.get("llmgw.model") == "simmy"]

    [leader] = receiver.wait_for(started, timeout=60, what="the leader's replica start")
    spans = in_trace(receiver, leader.trace_id, "replica start", "shard start", "launch", "engine load")
    [node] = spans["shard start"]
    # The node traced it though its own sample_ratio is 0: the leader had.
    assert node.service == "llmgw-agent" and node.parent_span_id == leader.span_id
    assert node.attributes["llmgw.model"] == "simmy"
    for step in ("launch", "engine load"):
        assert [s.parent_span_id for s in spans[step]] == [node.span_id], step
    assert spans["launch"][0].attributes["llmgw.engine"] == "sim"
    assert leader.attributes["llmgw.node"] == "node-t"
    assert leader.attributes["llmgw.outcome"] == "ready"


def test_with_tracing_turned_off_the_clients_traceparent_still_reaches_the_engine_as_it_came(gateway, receiver):
    off = gateway.ctl("ctl", "config", "set", "telemetry.otlp_endpoint", "")
    assert off.returncode == 0, off.stderr
    try:
        trace_id, _, header = traceparent()
        client = openai.OpenAI(api_key=gateway.key, base_url=gateway.client_url + "/v1", max_retries=0,
                               default_headers={"traceparent": header})
        client.chat.completions.create(model="sim", messages=[{"role": "user", "content": prompt()}])
        # The very header, the client's span id in it: no span of the gateway's came between.
        assert header in engine_traceparents(gateway)
        assert not [t for t in engine_traceparents(gateway) if trace_id in t and t != header]
    finally:
        on = gateway.ctl("ctl", "config", "set", "telemetry.otlp_endpoint", receiver.url)
        assert on.returncode == 0, on.stderr
