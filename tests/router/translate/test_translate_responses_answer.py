"""An engine's answer becomes a Responses `response`, whole or streamed.

Every response and event is read back with the OpenAI SDK's own models, and
streams are run through the SDK's own accumulator, so a shape the SDK (and
so Codex, which checks the same things) cannot read fails here.
"""

from __future__ import annotations

import json
import re

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from translate_chunks import call, chunk, completion, run, stream, usage

from llmgw.router.translate.responses import ResponsesStream, chat_to_response

EVENTS = TypeAdapter(ResponseStreamEvent)
REQUEST = {"model": "gpt-oss", "instructions": "You are Codex.", "input": "hi",
           "tools": [{"type": "function", "name": "shell", "description": "Run", "strict": False,
                      "parameters": {"type": "object", "properties": {}}}],
           "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium"}}


def response(chat: dict, request: dict = REQUEST) -> dict:
    out = chat_to_response(chat, model="gpt-oss", request=request)
    Response.model_validate(out)
    return out


def events_of(chunks: list[dict], request: dict = REQUEST, **kw) -> list[tuple[str, dict]]:
    events = run(ResponsesStream(model="gpt-oss", request=request, **kw), chunks)
    check(events)
    return events


def check(events):
    for i, (name, data) in enumerate(events):
        assert name == data["type"]
        assert data["sequence_number"] == i
        EVENTS.validate_python(data)


def accumulate(events, request: dict = REQUEST):
    """The final response the OpenAI SDK's stream state assembles, checking identities as it goes."""
    from openai import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState

    state = ResponseStreamState(input_tools=request.get("tools", []), text_format=omit)
    for _, data in events:
        state.handle_event(EVENTS.validate_python(data))
    return state._completed_response


def test_an_answer_becomes_a_completed_response_with_one_message():
    out = response(completion(content="Hello."))
    assert out["id"] == "resp_5f1c2a9b7e"
    assert out["object"] == "response" and out["status"] == "completed"
    assert out["created_at"] == 1760000000
    assert out["output"] == [{"type": "message", "id": "msg_5f1c2a9b7e", "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": "Hello.", "annotations": [],
                                           "logprobs": []}]}]
    assert Response.model_validate(out).output_text == "Hello."


def test_the_response_echoes_the_requests_settings():
    out = response(completion(content="x"))
    assert out["instructions"] == "You are Codex."
    assert out["tool_choice"] == "auto" and out["parallel_tool_calls"] is False
    assert out["tools"] == [{"type": "function", "name": "shell", "description": "Run", "strict": False,
                             "parameters": {"type": "object", "properties": {}}}]
    assert out["reasoning"]["effort"] == "medium"
    bare = response(completion(content="x"), {"input": "x"})
    assert (bare["tools"], bare["tool_choice"], bare["parallel_tool_calls"]) == ([], "auto", True)


def test_usage_has_the_cached_and_reasoning_details():
    out = response(completion(content="x", prompt=900, completion_tokens=40, cached=512, reasoning_tokens=25))
    assert out["usage"] == {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 512,
                                                                          "cache_write_tokens": 0},
                            "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 25},
                            "total_tokens": 940}


def test_reasoning_is_a_reasoning_item_before_the_message_with_its_text_as_content():
    out = response(completion(content="4", reasoning="2+2=4"))
    assert out["output"][0] == {"type": "reasoning", "id": "rs_5f1c2a9b7e", "summary": [],
                                "content": [{"type": "reasoning_text", "text": "2+2=4"}], "status": "completed"}
    assert out["output"][1]["type"] == "message"


def test_tool_calls_become_function_call_items_keeping_the_engines_call_id():
    out = response(completion(content=None, finish="tool_calls", tool_calls=[
        call("chatcmpl-tool-1", "shell", '{"command": ["ls"]}'), call("chatcmpl-tool-2", "shell", "{bad")]))
    assert out["output"] == [
        {"type": "function_call", "id": "fc_5f1c2a9b7e_0", "call_id": "chatcmpl-tool-1", "name": "shell",
         "arguments": '{"command": ["ls"]}', "status": "completed"},
        {"type": "function_call", "id": "fc_5f1c2a9b7e_1", "call_id": "chatcmpl-tool-2", "name": "shell",
         "arguments": "{bad", "status": "completed"}]


def test_an_answer_cut_by_its_token_limit_is_incomplete_for_max_output_tokens():
    out = response(completion(content="Half an ans", finish="length"))
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["output"][0]["status"] == "incomplete"


def test_a_streamed_answer_has_the_lifecycle_and_item_events_in_order():
    events = events_of(stream(content=["Hel", "lo"], prompt=30, completion=2))
    assert [n for n, _ in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    done = events[-1][1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["input_tokens"] == 30 and done["usage"]["output_tokens"] == 2
    final = accumulate(events)
    assert final.output_text == "Hello"
    assert final.id == "resp_5f1c2a9b7e"


def test_streamed_reasoning_uses_reasoning_text_events_on_its_own_item():
    events = events_of(stream(reasoning=["Think", "ing"], content=["42"]))
    deltas = [(n, d["output_index"], d["delta"]) for n, d in events if n.endswith(".delta")]
    assert deltas == [("response.reasoning_text.delta", 0, "Think"), ("response.reasoning_text.delta", 0, "ing"),
                      ("response.output_text.delta", 1, "42")]
    items = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "Thinking"}]
    final = accumulate(events)
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output_text == "42"


def test_streamed_tool_calls_are_function_call_items_with_argument_deltas():
    events = events_of(stream(content=["Running."], finish="tool_calls", tools=[
        ("chatcmpl-tool-1", "shell", ['{"command": ', '["ls"]}']),
        ("chatcmpl-tool-2", "shell", ['{"command": ["pwd"]}'])]))
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert [(a["type"], a.get("call_id")) for a in added] == [("message", None), ("function_call", "chatcmpl-tool-1"),
                                                              ("function_call", "chatcmpl-tool-2")]
    assert added[1]["arguments"] == "" and added[1]["status"] == "in_progress"
    args_done = [d["arguments"] for n, d in events if n == "response.function_call_arguments.done"]
    assert args_done == ['{"command": ["ls"]}', '{"command": ["pwd"]}']
    final = accumulate(events)
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("chatcmpl-tool-1", "shell", '{"command": ["ls"]}'), ("chatcmpl-tool-2", "shell", '{"command": ["pwd"]}')]


def test_a_second_stretch_of_text_gets_an_item_id_of_its_own():
    chunks = [chunk({"content": "Before."}),
              chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
              chunk({"content": "After."}), chunk({}, "stop")]
    events = events_of(chunks)
    ids = [d["item"]["id"] for n, d in events if n == "response.output_item.added"]
    assert len(ids) == len(set(ids)) == 3
    assert accumulate(events).output_text == "Before.After."


def test_a_streamed_answer_cut_by_its_token_limit_ends_with_response_incomplete():
    events = events_of(stream(content=["Half"], finish="length"))
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_without_the_engines_usage_the_estimate_given_and_a_count_of_pieces_are_sent():
    events = events_of(stream(content=["a", "b"], with_usage=False), input_tokens=70)
    assert events[-1][1]["response"]["usage"]["input_tokens"] == 70
    assert events[-1][1]["response"]["usage"]["output_tokens"] == 2
    assert events[-1][1]["response"]["usage"]["total_tokens"] == 72


def test_a_cut_stream_ends_with_response_failed_carrying_the_sentence_and_what_was_sent():
    translator = ResponsesStream(model="gpt-oss", request=REQUEST)
    events = translator.feed(chunk({"role": "assistant", "content": "Hal"}))
    events += translator.error("the model's engine stopped answering")
    check(events)
    failed = events[-1][1]["response"]
    assert events[-1][0] == "response.failed"
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "the model's engine stopped answering"}
    assert failed["output"][0]["content"][0]["text"] == "Hal"
    assert translator.feed(chunk({"content": "f"})) == [] and translator.finish() == []


def test_an_engine_that_sent_nothing_still_gives_a_well_formed_empty_response():
    events = events_of([])
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.completed"]
    assert accumulate(events).output == []


def test_an_error_the_engine_sends_in_its_stream_becomes_response_failed():
    translator = ResponsesStream(model="m", request={})
    events = translator.feed({"object": "error", "message": "prompt too long", "code": 400})
    check(events)
    assert events[-1][0] == "response.failed"
    assert "prompt too long" in events[-1][1]["response"]["error"]["message"]


def test_only_usage_chunks_after_the_finish_change_nothing_but_the_counts():
    chunks = stream(content=["x"], with_usage=False) + [chunk(usage=usage(5, 1), choices=False)]
    events = events_of(chunks)
    assert events[-1][1]["response"]["usage"]["input_tokens"] == 5


NAMESPACED = {**REQUEST, "tools": REQUEST["tools"] + [
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
     "tools": [{"type": "function", "name": "close_agent", "strict": False,
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}]},
    {"type": "web_search", "external_web_access": False}]}


def test_a_call_of_a_namespaced_function_goes_back_under_its_namespace():
    out = response(completion(content=None, finish="tool_calls", tool_calls=[
        call("c1", "multi_agent_v1__close_agent", '{"target":"a"}'), call("c2", "shell", "{}")]), NAMESPACED)

    assert [(o.get("namespace"), o["name"]) for o in out["output"]] == [("multi_agent_v1", "close_agent"),
                                                                      (None, "shell")]
    assert [t["type"] for t in out["tools"]] == ["function", "namespace", "web_search"]


def test_a_streamed_call_of_a_namespaced_function_goes_back_under_its_namespace():
    events = events_of(stream(finish="tool_calls", tools=[
        ("c1", "multi_agent_v1__close_agent", ['{"target":', '"a"}'])]), NAMESPACED)

    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert (added[0]["namespace"], added[0]["name"]) == ("multi_agent_v1", "close_agent")
    (called,) = [o for o in accumulate(events).output if o.type == "function_call"]
    assert (called.namespace, called.name, called.arguments) == ("multi_agent_v1", "close_agent", '{"target":"a"}')


def test_ids_made_from_an_engine_id_full_of_digits_hold_no_long_run_of_digits():
    # A sim-engine's id: a random hex part that happened to end in digits, and a zero-padded counter. Its run
    # of 16 digits passes the Luhn check, and was refused as a card when the client sent the ids back.
    chat = {**completion(content=None, finish="tool_calls", tool_calls=[call("", "shell", "{}")]),
            "id": "chatcmpl-4111111111111111"}
    out = response(chat)
    ids = [out["id"]] + [i for item in out["output"] for i in (item["id"], item.get("call_id")) if i]
    assert out["id"].startswith("resp_41111111") and out["output"][0]["id"].startswith("fc_41111111")
    assert ids and all(not re.search(r"\d{9}", i.replace("-", "")) for i in ids)
    streamed = events_of([{**chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]}),
        "id": "chatcmpl-4111111111111111"}, {**chunk(finish="tool_calls"), "id": "chatcmpl-4111111111111111"}])
    made = re.findall(r'"(?:id|call_id)": ?"([^"]+)"', json.dumps([data for _, data in streamed]))
    assert made and all(not re.search(r"\d{9}", i.replace("-", "")) for i in made)
