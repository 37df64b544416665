"""The id an answer gave the client is read from what the client was sent."""

from llmgw.router.answerid import answer_id, stream_answer_id, whole_answer_id


def test_a_whole_answer_s_id_is_its_top_level_one_even_after_choices_with_tool_call_ids():
    # llama.cpp writes "choices" (and its tool calls' ids) before "id".
    body = b'{"choices":[{"message":{"tool_calls":[{"id":"call_1"}]}}],"id":"chatcmpl-xyz"}'
    assert whole_answer_id(body) == "chatcmpl-xyz"
    assert whole_answer_id(b"not json") is None


def test_a_stream_s_id_is_in_its_first_event_whatever_the_api():
    assert stream_answer_id(b'data: {"id":"chatcmpl-a","choices":[]}\n\n') == "chatcmpl-a"
    anthropic = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_b"}}\n\n'
                 b'event: ping\ndata: {"type":"ping"}\n\n')
    assert stream_answer_id(anthropic) == "msg_b"
    responses = b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_c"}}\n\n'
    assert stream_answer_id(responses) == "resp_c"
    assert stream_answer_id(b": waiting\n\n") is None
    assert answer_id(["not", "a", "dict"]) is None
