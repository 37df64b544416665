"""The real Anthropic and OpenAI SDKs, over real HTTP, read what the translators write.

A small aiohttp server on 127.0.0.1 stands where the gateway's handlers will:
it translates the SDK's request with messages_to_chat / responses_to_chat,
then answers with the translators' output for a chunk list an engine would
send. So the SDKs' own request encoding, SSE parsing and stream accumulators
(`get_final_message`, `get_final_response`) are exercised end to end.
"""

from __future__ import annotations

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from translate_chunks import call, completion, stream

from llmgw.router.translate.anthropic import (
    MessagesStream,
    anthropic_error,
    chat_to_message,
    messages_to_chat,
    wants_thinking,
)
from llmgw.router.translate.common import TranslateError, encode_sse
from llmgw.router.translate.responses import ResponsesStream, chat_to_response, responses_to_chat


class Replay:
    """What the next request is answered with, and what it was translated to."""

    def __init__(self) -> None:
        self.chunks: list[dict] = []
        self.completion: dict = {}
        self.cut = False
        self.chat_requests: list[dict] = []


REPLAY = web.AppKey("replay", Replay)


async def _sse(request: web.Request, events) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for batch in events:
        if batch:
            await response.write(encode_sse(batch))
    await response.write_eof()
    return response


async def _messages(request: web.Request) -> web.StreamResponse:
    replay: Replay = request.app[REPLAY]
    body = await request.json()
    try:
        chat = messages_to_chat(body, upstream_model="Qwen/Qwen3-8B", thinking_mode="chat_template_kwargs")
    except TranslateError as e:
        return web.json_response(anthropic_error(400, e.message), status=400)
    replay.chat_requests.append(chat)
    if not chat.get("stream"):
        return web.json_response(chat_to_message(replay.completion, model=body["model"],
                                                 include_thinking=wants_thinking(body)))
    translator = MessagesStream(model=body["model"], include_thinking=wants_thinking(body))
    batches = [translator.feed(c) for c in replay.chunks]
    batches.append(translator.error("the model's engine stopped answering") if replay.cut else translator.finish())
    return await _sse(request, batches)


async def _responses(request: web.Request) -> web.StreamResponse:
    replay: Replay = request.app[REPLAY]
    body = await request.json()
    try:
        chat = responses_to_chat(body, upstream_model="openai/gpt-oss-20b")
    except TranslateError as e:
        return web.json_response({"error": {"message": e.message, "type": "invalid_request_error",
                                            "param": e.param, "code": None}}, status=400)
    replay.chat_requests.append(chat)
    if not chat.get("stream"):
        return web.json_response(chat_to_response(replay.completion, model=body["model"], request=body))
    translator = ResponsesStream(model=body["model"], request=body)
    batches = [translator.feed(c) for c in replay.chunks]
    batches.append(translator.error("the model's engine stopped answering") if replay.cut else translator.finish())
    return await _sse(request, batches)


@pytest.fixture
async def gateway():
    app = web.Application()
    app[REPLAY] = Replay()
    app.router.add_post("/v1/messages", _messages)
    app.router.add_post("/v1/responses", _responses)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", app[REPLAY]
    await runner.cleanup()


@pytest.fixture
async def claude(gateway):
    url, replay = gateway
    async with anthropic.AsyncAnthropic(base_url=url, api_key="llmgw-test", max_retries=0) as client:
        yield client, replay


@pytest.fixture
async def codex(gateway):
    url, replay = gateway
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="llmgw-test", max_retries=0) as client:
        yield client, replay


WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


async def test_the_anthropic_sdk_assembles_a_streamed_answer_with_thinking_text_and_a_tool_call(claude):
    client, replay = claude
    replay.chunks = stream(reasoning=["The user ", "wants weather."], content=["Checking."], finish="tool_calls",
                           tools=[("chatcmpl-tool-9", "get_weather", ['{"city"', ': "Paris"}'])],
                           prompt=300, completion=12, cached=256)
    async with client.messages.stream(model="qwen3-8b", max_tokens=4096, tools=[WEATHER],
                                      thinking={"type": "enabled", "budget_tokens": 2048},
                                      messages=[{"role": "user", "content": "Weather in Paris?"}]) as s:
        texts = [t async for t in s.text_stream]
        final = await s.get_final_message()
    assert texts == ["Checking."]
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "The user wants weather."
    assert final.content[2].id == "chatcmpl-tool-9" and final.content[2].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (44, 12, 256)
    sent = replay.chat_requests[0]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["tools"][0]["function"]["name"] == "get_weather"


async def test_the_anthropic_sdk_reads_a_whole_message_and_sends_a_tool_result_back(claude):
    client, replay = claude
    replay.completion = completion(content="It is 18°C in Paris.", reasoning="unasked", prompt=80,
                                   completion_tokens=9)
    answer = await client.messages.create(
        model="qwen3-8b", max_tokens=256, tools=[WEATHER],
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                     "input": {"city": "Paris"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                "content": "18°C"}]}])
    assert [b.type for b in answer.content] == ["text"]  # thinking was not asked for
    assert answer.content[0].text == "It is 18°C in Paris."
    assert answer.stop_reason == "end_turn" and answer.usage.output_tokens == 9
    assert replay.chat_requests[0]["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_1", "content": "18°C"}


async def test_the_anthropic_sdk_raises_the_refusals_sentence_as_a_bad_request(claude):
    client, _ = claude
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model="qwen3-8b", max_tokens=100, messages=[
            {"role": "user", "content": [{"type": "document", "source": {
                "type": "text", "media_type": "text/plain", "data": "hello"}}]}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "documents" in caught.value.body["error"]["message"]


async def test_the_anthropic_sdk_raises_when_the_stream_is_cut(claude):
    client, replay = claude
    replay.chunks, replay.cut = stream(content=["Hal"], with_usage=False)[:-1], True
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(model="qwen3-8b", max_tokens=100,
                                          messages=[{"role": "user", "content": "hi"}]) as s:
            await s.get_final_message()
    assert "the model's engine stopped answering" in str(caught.value)


async def test_the_openai_sdk_assembles_a_streamed_response_with_reasoning_text_and_calls(codex):
    client, replay = codex
    replay.chunks = stream(reasoning=["Need ", "ls."], content=["Listing."], finish="tool_calls",
                           tools=[("chatcmpl-tool-1", "shell", ['{"command": ', '["ls"]}']),
                                  ("chatcmpl-tool-2", "shell", ['{"command": ["pwd"]}'])], prompt=500, completion=20,
                           cached=128)
    tools = [{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
              "parameters": {"type": "object", "properties": {"command": {"type": "array",
                                                                          "items": {"type": "string"}}}}}]
    async with client.responses.stream(model="gpt-oss", instructions="You are Codex.", tools=tools,
                                       reasoning={"effort": "high"}, store=False,
                                       input=[{"type": "message", "role": "user",
                                               "content": [{"type": "input_text", "text": "list files"}]}]) as s:
        deltas = [e.delta async for e in s if e.type == "response.output_text.delta"]
        final = await s.get_final_response()
    assert deltas == ["Listing."]
    assert final.status == "completed" and final.output_text == "Listing."
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output[0].content[0].text == "Need ls."
    assert [(o.call_id, o.arguments) for o in final.output[2:]] == [
        ("chatcmpl-tool-1", '{"command": ["ls"]}'), ("chatcmpl-tool-2", '{"command": ["pwd"]}')]
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.input_tokens_details.cached_tokens) == \
        (500, 20, 128)
    sent = replay.chat_requests[0]
    assert sent["reasoning_effort"] == "high"
    assert sent["messages"][0] == {"role": "system", "content": "You are Codex."}


async def test_the_openai_sdk_reads_a_whole_response(codex):
    client, replay = codex
    replay.completion = completion(content=None, finish="tool_calls",
                                   tool_calls=[call("call_1", "shell", '{"command": ["ls"]}')])
    answer = await client.responses.create(model="gpt-oss", input="list files")
    assert answer.status == "completed"
    assert answer.output[0].type == "function_call" and answer.output[0].call_id == "call_1"


async def test_the_openai_sdk_raises_the_refusal_of_previous_response_id_as_a_bad_request(codex):
    client, _ = codex
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model="gpt-oss", input="and then?", previous_response_id="resp_1")
    assert "send the whole conversation" in caught.value.message


async def test_the_openai_sdk_sees_response_failed_when_the_stream_is_cut(codex):
    client, replay = codex
    replay.chunks, replay.cut = stream(content=["Hal"], with_usage=False)[:-1], True
    async with client.responses.stream(model="gpt-oss", input="hi") as s:
        seen = [e async for e in s]
    assert seen[-1].type == "response.failed"
    assert seen[-1].response.error.message == "the model's engine stopped answering"
    assert orjson.loads(seen[-1].response.model_dump_json())["output"][0]["content"][0]["text"] == "Hal"
