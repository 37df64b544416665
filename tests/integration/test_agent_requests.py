"""What agent clients send that the engines cannot take as it is: the gateway changes it, and says so.

A `max_tokens` the context cannot hold is lowered to what the prompt leaves
(X-Llmgw-Max-Tokens-Lowered), in every API shape; tools that run at OpenAI
are left out (X-Llmgw-Tools-Dropped); a namespace's functions are offered
to the engine and their calls come back under the namespace. Each is in the
request's usage row too. Real SDKs, a real server and a real sim-engine.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.servers import serving_with_first_key, usage_rows, write_config

CONTEXT = 4096
QUESTION = "Say something. " * 200  # 3000 characters: about 750 tokens


@pytest.fixture
def gw(servers, engines, tmp_path):
    engine = engines("sim", "--context-length", str(CONTEXT))
    config = write_config(tmp_path / "gw.yaml", {"models": [
        {"name": "sim", "endpoints": [engine.url], "context_length": CONTEXT}]})
    return serving_with_first_key(servers("gw", config=config))


def lowered(header: str | None) -> tuple[int, int]:
    assert header, "no X-Llmgw-Max-Tokens-Lowered header"
    asked, sent = header.split("->")
    return int(asked), int(sent)


def test_a_max_tokens_the_context_cannot_hold_is_lowered_to_what_the_prompt_leaves_in_every_api_shape(gw):
    user = [{"role": "user", "content": QUESTION}]
    answers = {
        "chat": gw.openai.chat.completions.with_raw_response.create(model="sim", messages=user, max_tokens=4000),
        "chat, max_completion_tokens": gw.openai.chat.completions.with_raw_response.create(
            model="sim", messages=user, max_completion_tokens=4000),
        "completions": gw.openai.completions.with_raw_response.create(model="sim", prompt=QUESTION, max_tokens=4000),
        "responses": gw.openai.responses.with_raw_response.create(model="sim", input=QUESTION,
                                                                 max_output_tokens=4000),
        "messages": gw.anthropic.messages.with_raw_response.create(model="sim", messages=user, max_tokens=4000),
    }

    for shape, raw in answers.items():
        asked, sent = lowered(raw.headers.get("x-llmgw-max-tokens-lowered"))
        assert raw.status_code == 200, shape
        assert asked == 4000 and 0 < sent < CONTEXT - len(QUESTION) // 4, shape
    streamed = gw.anthropic.messages.with_streaming_response.create(model="sim", messages=user, max_tokens=4000,
                                                                    stream=True)
    with streamed as response:
        assert lowered(response.headers.get("x-llmgw-max-tokens-lowered"))[0] == 4000
        assert "message_stop" in response.read().decode()
    recorded = usage_rows(gw, 6)
    assert all(r["status"] == 200 and r["detail"]["max_tokens_lowered"]["asked"] == 4000 for r in recorded)
    # What fits is sent as it was asked for, and nothing is said.
    fits = gw.openai.chat.completions.with_raw_response.create(model="sim", messages=user, max_tokens=100)
    assert "x-llmgw-max-tokens-lowered" not in fits.headers


def test_a_prompt_that_fills_the_context_by_itself_is_refused_by_the_engine_with_its_length(gw):
    with pytest.raises(openai.BadRequestError) as refused:
        gw.openai.chat.completions.create(model="sim", messages=[{"role": "user", "content": QUESTION * 8}],
                                          max_tokens=100)
    assert refused.value.status_code == 400
    assert "maximum context length is 4096 tokens" in str(refused.value)


CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.",
     "tools": [{"type": "function", "name": "close_agent", "description": "Close an agent", "strict": False,
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}},
                               "required": ["target"]}}]},
    {"type": "web_search", "external_web_access": False},
    {"type": "code_interpreter", "container": {"type": "auto"}},
]


def test_a_namespaced_call_comes_back_under_its_namespace_and_openais_own_tools_are_left_out_and_said(gw):
    raw = gw.openai.responses.with_raw_response.create(
        model="sim", input="Call multi_agent_v1__close_agent.", tools=CODEX_TOOLS)
    answer = raw.parse()

    assert raw.headers["x-llmgw-tools-dropped"] == "web_search, code_interpreter"
    (call,) = [o for o in answer.output if o.type == "function_call"]
    assert (call.namespace, call.name, json.loads(call.arguments)) == ("multi_agent_v1", "close_agent",
                                                                       {"target": "x"})
    with gw.openai.responses.stream(model="sim", input="Call multi_agent_v1__close_agent.",
                                    tools=CODEX_TOOLS) as stream:
        final = stream.get_final_response()
    (call,) = [o for o in final.output if o.type == "function_call"]
    assert (call.namespace, call.name) == ("multi_agent_v1", "close_agent")
    assert [r["detail"]["tools_dropped"] for r in usage_rows(gw, 2)] == [["web_search", "code_interpreter"]] * 2
