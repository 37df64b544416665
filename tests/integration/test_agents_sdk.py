"""The OpenAI Agents SDK against a real server under the baseline policy, its tool calls played by a sim-engine.

The SDK's second turn sends back the ids of the first: the engine's tool
call id and, through /v1/responses, the gateway's own item ids. Those ids
hold long runs of digits (a sim-engine's are a random hex part and a
zero-padded counter), which the baseline's card rule read as card numbers
and refused (issue 25, item 21).

A sim-engine given tools calls the first with example arguments when the
last message is the user's, and answers in words after the tool's result;
so each user turn here is one tool call and one answer. The conversation
is carried on, so every request holds every id made before it.
"""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from tests.support.servers import write_config

# Per API and way of answering (streamed or not): 10 conversations of 5 turns, 50 tool-calling turns; 200 in
# all. Many short conversations side by side rather than one long one keep the test's time in seconds: the
# ids still come back on every turn after the first.
CONVERSATIONS, TURNS = 10, 5


@pytest.fixture
def cluster(servers, engines, tmp_path):
    """A cluster as `server init` makes it (the baseline on every request) before a sim-engine."""
    engine = engines("qwen")
    server = servers("gw", config=write_config(tmp_path / "server.yaml",
                                               {"models": [{"name": "qwen", "endpoints": [engine.url]}]}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.key = json.loads(done.stdout)["key"]["key"]
    return server.start()


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _agent(cluster, api: str) -> Agent:
    client = openai.AsyncOpenAI(api_key=cluster.key, base_url=cluster.client_url + "/v1", max_retries=0)
    model = (OpenAIResponsesModel(model="qwen", openai_client=client) if api == "responses"
             else OpenAIChatCompletionsModel(model="qwen", openai_client=client))
    return Agent(name="forecaster", instructions="Answer with the weather tool.", tools=[weather], model=model)


async def _conversation(agent: Agent, streamed: bool) -> list:
    """TURNS user turns, each answered with a tool call and then words; the items the conversation holds."""
    history: list = []
    for turn in range(TURNS):
        given = [*history, {"role": "user", "content": f"what is the weather in town {turn}?"}]
        if streamed:
            result = Runner.run_streamed(agent, given)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, given)
        history = result.to_input_list()
    return history


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_agents_tool_calling_turns_are_never_refused_for_the_ids_they_carry(cluster, api):
    set_tracing_disabled(True)  # nothing leaves loopback: the SDK would send its traces to OpenAI

    agent = _agent(cluster, api)
    histories = await asyncio.gather(*(_conversation(agent, streamed)
                                       for streamed in (False, True) for _ in range(CONVERSATIONS)))

    for history in histories:
        calls = [item for item in history if item.get("type") == "function_call"]
        results = [item for item in history if item.get("type") == "function_call_output"]
        assert len(calls) == len(results) == TURNS
        assert {c["call_id"] for c in calls} == {r["call_id"] for r in results}

async def test_a_chat_completion_whose_history_holds_a_card_like_call_id_is_answered(cluster):
    client = openai.AsyncOpenAI(api_key=cluster.key, base_url=cluster.client_url + "/v1", max_retries=0)
    call_id = "call_4111111111111111"  # 16 digits that pass the Luhn check
    messages = [
        {"role": "user", "content": "what is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]

    answer = await client.chat.completions.create(model="qwen", messages=messages, max_tokens=8)

    assert answer.choices[0].finish_reason in ("stop", "length") and answer.choices[0].message.content
