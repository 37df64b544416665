"""How an answer is billed when the engine's usage never came, and how much of it reached the client."""

from __future__ import annotations

import orjson

from llmgw.config.guard import Policy, Rules
from llmgw.guard.gate import OutputChecker
from llmgw.guard.policy import combine_policies
from llmgw.router.call import Call
from llmgw.router.guarded import ChunkGuard
from llmgw.router.relay import StreamScanner, TranslatedStream
from llmgw.router.tally import Tally, estimate_prompt_tokens, settle_whole, token_events
from llmgw.router.translate import anthropic as anth
from llmgw.router.translate import responses as resp_api
from llmgw.router.translate.common import encode_sse

QUESTION = "Say something about foxes and dogs, at some length please."
CHAT_BODY = {"model": "qwen", "messages": [{"role": "user", "content": QUESTION}]}


def _call(api: str = "chat", body: dict | None = None) -> Call:
    return Call(id="req_1", api=api, principal=None, model=None, upstream_path="/chat/completions",
                upstream_body=body if body is not None else CHAT_BODY, stream=True, wants_usage=False,
                profile="", session_key=None, band=None)


def _chunk(text: str | None = None, finish: str | None = None) -> dict:
    delta = {"content": text} if text is not None else {}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _events(*chunks: dict) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


WORDS = [" the", " quick", " brown", " fox"]


def test_a_cut_stream_read_as_bytes_or_parsed_counts_one_token_an_event_and_none_for_the_finish():
    events = [_chunk(w) for w in WORDS] + [_chunk(finish="stop")]
    assert token_events(_events(*events)) == 4
    tally = Tally(_call())
    for chunk in events:
        tally.chunk(chunk)
    assert tally.produced == 4


def test_the_prompt_estimate_is_the_same_for_one_question_asked_through_chat_messages_and_responses():
    from_messages = anth.messages_to_chat({"model": "qwen", "max_tokens": 12,
                                           "messages": [{"role": "user", "content": QUESTION}]},
                                          upstream_model="qwen", thinking_mode="chat_template_kwargs")
    from_responses = resp_api.responses_to_chat({"model": "qwen", "input": QUESTION}, upstream_model="qwen")
    estimates = {estimate_prompt_tokens(body, "chat") for body in (CHAT_BODY, from_messages, from_responses)}
    assert estimates == {(len(QUESTION) + 3) // 4}


def test_a_prompt_of_token_ids_is_estimated_one_token_an_id():
    assert estimate_prompt_tokens({"prompt": [1, 2, 3, 4, 5]}, "completions") == 5
    assert estimate_prompt_tokens({"input": "abcdefgh"}, "embeddings") == 2


def _guard() -> ChunkGuard:
    """Output rules with `stream: buffer_all`: the text is held until the answer ends."""
    effective = combine_policies([("p", Policy(mode="enforce", stream="buffer_all", output=Rules(secrets="block")))])
    return ChunkGuard(OutputChecker(effective, None))


def test_a_stream_cut_while_a_guardrail_held_its_text_is_billed_in_full_and_delivered_as_nothing():
    call = _call()
    scanner = StreamScanner(call, guard=_guard())
    sent = scanner.scan(_events(*[_chunk(w) for w in WORDS]))
    assert b"quick" not in sent  # the guardrail holds it all
    scanner.finish()
    assert call.completion_tokens == 4 and call.delivered_tokens == 0
    assert call.prompt_tokens == (len(QUESTION) + 3) // 4
    assert call.estimated == ("completion_tokens", "prompt_tokens")
    assert call.detail()["delivered_tokens"] == 0


def test_messages_and_responses_streams_cut_at_the_same_moment_bill_as_chat_does():
    billed = []
    for translator in (anth.MessagesStream(model="qwen"), resp_api.ResponsesStream(model="qwen", request={})):
        call = _call("messages")
        stream = TranslatedStream(call, translator, encode_sse, guard=_guard())
        stream.transform(_events(*[_chunk(w) for w in WORDS]))
        assert b"error" in stream.cut("the engine stopped before the answer was complete")
        billed.append((call.prompt_tokens, call.completion_tokens, call.delivered_tokens))
    assert billed == [((len(QUESTION) + 3) // 4, 4, 0)] * 2


def test_the_engines_own_usage_is_the_bill_and_nothing_is_said_estimated():
    call = _call()
    scanner = StreamScanner(call)
    usage = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 4,
                                                   "prompt_tokens_details": {"cached_tokens": 16}}}
    scanner.scan(_events(*[_chunk(w) for w in WORDS], _chunk(finish="stop"), usage) + b"data: [DONE]\n\n")
    scanner.finish()
    assert (call.prompt_tokens, call.cached_tokens, call.completion_tokens) == (40, 16, 4)
    assert call.estimated == () and "estimated" not in call.detail() and "delivered_tokens" not in call.detail()


def test_a_whole_answer_a_guardrail_blocked_is_billed_but_not_delivered():
    call = _call()
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "the quick brown fox"},
                           "finish_reason": "stop"}], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}
    blocked = {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                            "finish_reason": "content_filter"}]}
    settle_whole(call, answer, blocked)
    assert (call.prompt_tokens, call.completion_tokens, call.delivered_tokens) == (9, 4, 0)
    assert call.estimated == ()


def test_an_embeddings_answer_has_no_completion_to_estimate():
    call = _call("embeddings", {"model": "e", "input": "abcdefgh"})
    settle_whole(call, {"data": [], "usage": {"prompt_tokens": 2, "total_tokens": 2}}, None)
    assert (call.prompt_tokens, call.completion_tokens, call.estimated) == (2, 0, ())


def test_an_answer_that_reached_its_end_was_all_delivered_though_a_redaction_made_it_shorter():
    effective = combine_policies([("p", Policy(mode="enforce", output=Rules(cards="redact")))])
    call = _call()
    call.checker = OutputChecker(effective, None)
    scanner = StreamScanner(call, guard=ChunkGuard(call.checker))
    call.status = 200
    sent = scanner.scan(_events(_chunk("Pay with 4111 1111 "), _chunk("1111 1111 today."), _chunk(finish="stop")))
    assert b"4111" not in sent and b"today." in sent
    scanner.finish()
    assert call.delivered_tokens == call.completion_tokens == 2
    assert "delivered_tokens" not in call.detail()


def test_an_engine_that_writes_data_without_the_space_is_read_by_the_policy_and_billed_by_its_own_usage():
    effective = combine_policies([("p", Policy(mode="enforce", output=Rules(cards="redact")))])
    call = _call()
    call.checker = OutputChecker(effective, None)
    scanner = StreamScanner(call, guard=ChunkGuard(call.checker))
    call.status = 200
    usage = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 2}}
    tight = _events(_chunk("Pay with 4111 1111 1111 1111 today."), _chunk(finish="stop"), usage).replace(
        b"data: ", b"data:")
    sent = scanner.scan(tight + b"data:[DONE]\n\n")
    assert b"4111" not in sent and b"today." in sent
    scanner.finish()
    assert (call.prompt_tokens, call.completion_tokens, call.estimated) == (40, 2, ())
