"""An engine's answer becomes Anthropic's message, whole or streamed.

Every message and event is read back with the Anthropic SDK's own models, so
a shape the SDK cannot read fails here, not in a person's editor.
"""

from __future__ import annotations

import orjson
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter
from translate_chunks import call, chunk, completion, run, stream, usage

from llmgw.router.translate.anthropic import MessagesStream, chat_to_message, encode_sse, wants_thinking

EVENTS = TypeAdapter(RawMessageStreamEvent)


def message(chat: dict, **kw) -> dict:
    out = chat_to_message(chat, model="claude-sonnet-4-5", **kw)
    Message.model_validate(out)
    return out


def events_of(chunks: list[dict], **kw) -> list[tuple[str, dict]]:
    events = run(MessagesStream(model="claude-sonnet-4-5", **kw), chunks)
    for name, data in events:
        assert name == data["type"]
        if name != "error":
            EVENTS.validate_python(data)
    return events


def names(events) -> list[str]:
    return [name for name, _ in events]


def accumulate(events) -> Message:
    """The message the Anthropic SDK assembles from these events."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot, bufs = None, {}
    for _, data in events:
        snapshot = accumulate_event(event=EVENTS.validate_python(data), current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def test_an_answer_becomes_a_message_with_its_text_and_end_turn():
    out = message(completion(content="Bonjour !"))
    assert out["id"] == "msg_5f1c2a9b7e"
    assert out["type"] == "message" and out["role"] == "assistant"
    assert out["model"] == "claude-sonnet-4-5"
    assert out["content"] == [{"type": "text", "text": "Bonjour !"}]
    assert out["stop_reason"] == "end_turn"
    assert out["stop_sequence"] is None


def test_usage_counts_cache_reads_apart_from_input_tokens_as_anthropic_does():
    out = message(completion(content="x", prompt=1200, completion_tokens=30, cached=1024))
    assert out["usage"] == {"input_tokens": 176, "output_tokens": 30, "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 1024}


def test_reasoning_comes_first_as_a_thinking_block_with_an_empty_signature():
    out = message(completion(content="4", reasoning="2+2 is 4."))
    assert out["content"] == [{"type": "thinking", "thinking": "2+2 is 4.", "signature": ""},
                              {"type": "text", "text": "4"}]


def test_reasoning_the_client_did_not_ask_for_is_left_out():
    out = message(completion(content="4", reasoning="2+2 is 4."), include_thinking=False)
    assert out["content"] == [{"type": "text", "text": "4"}]
    assert wants_thinking({"thinking": {"type": "enabled", "budget_tokens": 2048}})
    assert not wants_thinking({"thinking": {"type": "disabled"}})
    assert not wants_thinking({})


def test_vllms_newer_reasoning_field_is_read_too():
    chat = completion(content="4")
    chat["choices"][0]["message"]["reasoning"] = "thought"
    assert message(chat)["content"][0] == {"type": "thinking", "thinking": "thought", "signature": ""}


def test_tool_calls_become_tool_use_blocks_with_parsed_input():
    out = message(completion(content="Checking.", finish="tool_calls", tool_calls=[
        call("chatcmpl-tool-aa", "get_weather", '{"city": "Paris"}'),
        call("chatcmpl-tool-bb", "get_time", '{"tz": "CET"}')]))
    assert out["stop_reason"] == "tool_use"
    assert out["content"][1:] == [
        {"type": "tool_use", "id": "chatcmpl-tool-aa", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "chatcmpl-tool-bb", "name": "get_time", "input": {"tz": "CET"}}]


def test_arguments_that_are_not_a_json_object_become_an_empty_input():
    out = message(completion(content=None, finish="tool_calls", tool_calls=[
        call("a", "f", '{"city": "Par'), call("b", "g", "[1, 2]"), call("c", "h", "")]))
    assert [b["input"] for b in out["content"]] == [{}, {}, {}]


def test_a_tool_call_the_engine_ended_with_stop_is_still_tool_use():
    out = message(completion(content=None, finish="stop", tool_calls=[call("a", "f", "{}")]))
    assert out["stop_reason"] == "tool_use"


def test_finish_reasons_map_to_anthropics_stop_reasons():
    assert message(completion(content="x", finish="length"))["stop_reason"] == "max_tokens"
    assert message(completion(content="x", finish="content_filter"))["stop_reason"] == "refusal"
    matched = message(completion(content="x", finish="stop", stop_reason="</answer>"))
    assert (matched["stop_reason"], matched["stop_sequence"]) == ("stop_sequence", "</answer>")
    eos_token = message(completion(content="x", finish="stop", stop_reason=151645))
    assert (eos_token["stop_reason"], eos_token["stop_sequence"]) == ("end_turn", None)


def test_a_streamed_answer_is_message_start_a_text_block_message_delta_and_stop():
    events = events_of(stream(content=["Hel", "lo", "!"], prompt=12, completion=3))
    assert names(events) == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                             "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["id"] == "msg_5f1c2a9b7e" and start["content"] == [] and start["stop_reason"] is None
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == ["Hel", "lo", "!"]
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == 3 and final["usage"]["input_tokens"] == 12


def test_streamed_thinking_is_a_block_of_its_own_signed_just_before_it_stops():
    events = events_of(stream(reasoning=["Let me ", "think."], content=["42"]))
    blocks = [(n, d.get("index"), d.get("delta", {}).get("type") or d.get("content_block", {}).get("type"))
              for n, d in events[1:-2]]
    assert blocks == [("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
                      ("content_block_delta", 0, "thinking_delta"), ("content_block_delta", 0, "signature_delta"),
                      ("content_block_stop", 0, None), ("content_block_start", 1, "text"),
                      ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None)]
    final = accumulate(events)
    assert final.content[0].thinking == "Let me think." and final.content[0].signature == ""
    assert final.content[1].text == "42"


def test_streamed_thinking_is_left_out_when_the_client_did_not_ask():
    events = events_of(stream(reasoning=["hmm"], content=["42"]), include_thinking=False)
    assert [d["content_block"]["type"] for n, d in events if n == "content_block_start"] == ["text"]


def test_streamed_tool_calls_send_their_arguments_as_input_json_pieces_in_order():
    events = events_of(stream(content=["I'll look."], finish="tool_calls", tools=[
        ("chatcmpl-tool-1", "get_weather", ['{"city": ', '"Paris"}']),
        ("chatcmpl-tool-2", "get_time", ['{"tz"', ': "CET"}'])]))
    starts = [d for n, d in events if n == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [(0, "text"), (1, "tool_use"),
                                                                          (2, "tool_use")]
    assert starts[1]["content_block"] == {"type": "tool_use", "id": "chatcmpl-tool-1", "name": "get_weather",
                                          "input": {}}
    pieces = [(d["index"], d["delta"]["partial_json"]) for n, d in events
              if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert pieces == [(1, '{"city": '), (1, '"Paris"}'), (2, '{"tz"'), (2, ': "CET"}')]
    # Blocks close in order, each before the next opens.
    order = [(n, d["index"]) for n, d in events if n in ("content_block_start", "content_block_stop")]
    assert order == [("content_block_start", 0), ("content_block_stop", 0), ("content_block_start", 1),
                     ("content_block_stop", 1), ("content_block_start", 2), ("content_block_stop", 2)]
    final = accumulate(events)
    assert final.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in final.content[1:]] == [("get_weather", {"city": "Paris"}),
                                                               ("get_time", {"tz": "CET"})]


def test_a_whole_tool_call_in_one_delta_as_llama_cpp_sends_it_is_one_block():
    chunks = [chunk({"role": "assistant", "content": None}),
              chunk({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                                     "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]}),
              chunk({}, "tool_calls"), chunk(usage=usage(9, 5), choices=False)]
    final = accumulate(events_of(chunks))
    assert [(b.type, b.id, b.input) for b in final.content] == [("tool_use", "call_x", {"cmd": "ls"})]


def test_arguments_that_arrive_before_the_tools_name_wait_for_it():
    chunks = [chunk({"tool_calls": [{"index": 0, "id": "call_y", "function": {"arguments": '{"a"'}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}),
              chunk({}, "tool_calls")]
    events = events_of(chunks)
    assert [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"] == ['{"a": 1}']
    assert accumulate(events).content[0].input == {"a": 1}


def test_the_usage_that_arrives_after_the_finish_chunk_is_in_message_delta():
    events = events_of(stream(content=["x"], prompt=2000, completion=17, cached=1536))
    assert events[0][1]["message"]["usage"]["input_tokens"] == 0
    assert events[-2][1]["usage"] == {"input_tokens": 464, "output_tokens": 17, "cache_creation_input_tokens": 0,
                                      "cache_read_input_tokens": 1536}
    final = accumulate(events)
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == \
        (464, 17, 1536)


def test_without_the_engines_usage_the_estimate_given_and_a_count_of_pieces_are_sent():
    events = events_of(stream(content=["a", "b", "c"], with_usage=False), input_tokens=50)
    assert events[0][1]["message"]["usage"]["input_tokens"] == 50
    assert events[-2][1]["usage"] == {"input_tokens": 50, "output_tokens": 3}


def test_a_stop_string_and_a_length_finish_reach_the_streams_stop_reason():
    matched = events_of(stream(content=["x"], finish="stop", stop_reason="END"))
    assert matched[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    cut = events_of(stream(content=["x"], finish="length"))
    assert cut[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_an_engine_that_sent_nothing_still_gives_a_well_formed_empty_message():
    events = events_of([])
    assert names(events) == ["message_start", "message_delta", "message_stop"]
    assert accumulate(events).content == []


def test_a_cut_stream_ends_with_anthropics_error_event_and_nothing_after():
    translator = MessagesStream(model="claude-sonnet-4-5")
    sent = translator.feed(chunk({"role": "assistant", "content": "Hal"}))
    cut = translator.error("the model's engine stopped answering")
    assert cut == [("error", {"type": "error", "error": {"type": "api_error",
                                                          "message": "the model's engine stopped answering"}})]
    assert translator.feed(chunk({"content": "f"})) == [] and translator.finish() == []
    assert names(sent) == ["message_start", "content_block_start", "content_block_delta"]


def test_an_error_the_engine_sends_in_its_stream_becomes_the_error_event():
    translator = MessagesStream(model="m")
    events = translator.feed({"error": {"message": "out of KV cache", "code": 500}})
    assert events[0][0] == "error"
    assert "out of KV cache" in events[0][1]["error"]["message"]


def test_events_are_written_as_server_sent_events_in_one_piece():
    body = encode_sse([("message_stop", {"type": "message_stop"}),
                       ("ping", {"type": "ping", "text": "é"})])
    assert body == (b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
                    b'event: ping\ndata: ' + orjson.dumps({"type": "ping", "text": "é"}) + b"\n\n")


def test_a_finish_reason_that_is_not_text_ends_the_turn_instead_of_failing_the_answer():
    # An engine's finish_reason was looked up as a key: one sent as an array or an object raised TypeError
    # (unhashable) and the client got no answer at all.
    for finish in (["stop"], {"reason": "stop"}):
        assert message(completion(content="x", finish=finish))["stop_reason"] == "end_turn"
