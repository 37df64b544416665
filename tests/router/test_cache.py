"""The exact answer cache: what makes two requests the same, how long and how much is kept, and the replay."""

from __future__ import annotations

import json

import orjson
import pytest

from llmgw.router import cache as cachemod
from llmgw.router.assembly import Assembler
from llmgw.router.cache import AnswerCache, Entry, hit_headers
from llmgw.router.replay import replay_json, replay_stream

QUESTION = {
    "model": "qwen", "messages": [{"role": "system", "content": "You answer in one line."},
                                  {"role": "user", "content": "What is the capital of France?"}],
    "temperature": 0, "max_tokens": 64,
}
ANSWER = {
    "id": "chatcmpl-abc123", "object": "chat.completion", "created": 1800000000, "model": "qwen",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."},
                 "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
}
TOOL_ANSWER = {
    "id": "chatcmpl-tool1", "object": "chat.completion", "created": 1800000000, "model": "qwen",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        "logprobs": None, "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
}


def entry(answer=ANSWER, api="chat", at=1000.0, ttl=60.0) -> Entry:
    return Entry.make(api, answer, stored_at=at, ttl=ttl, model="qwen")


def sse_data(raw: bytes) -> list:
    out = []
    for event in raw.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:]
                out.append(payload.decode() if payload == b"[DONE]" else orjson.loads(payload))
    return out


def sse_events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for event in raw.strip().split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in event.split(b"\n"))
        out.append((lines[b"event"].decode(), orjson.loads(lines[b"data"])))
    return out


# -- what makes two requests the same ----------------------------------------------

def test_the_same_request_has_the_same_key_whatever_the_order_of_its_fields():
    reordered = dict(reversed(list(QUESTION.items())))
    assert cachemod.key("prj_1", "chat", QUESTION) == cachemod.key("prj_1", "chat", reordered)


@pytest.mark.parametrize("change", [
    {"temperature": 0.7}, {"top_p": 0.9}, {"top_k": 40}, {"max_tokens": 65}, {"stop": ["\n"]}, {"seed": 7},
    {"presence_penalty": 0.5}, {"frequency_penalty": 0.5}, {"n": 2}, {"model": "llama"},
    {"response_format": {"type": "json_object"}}, {"tool_choice": "none"},
    {"tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]},
    {"messages": [{"role": "user", "content": "What is the capital of Spain?"}]},
    {"min_p": 0.1},  # a field the cache has no name for still counts
])
def test_a_change_to_anything_that_decides_the_answer_is_another_key(change):
    assert cachemod.key("prj_1", "chat", QUESTION) != cachemod.key("prj_1", "chat", {**QUESTION, **change})


@pytest.mark.parametrize("change", [
    {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}, {"user": "alice"},
    {"metadata": {"ticket": "42"}},
])
def test_streaming_and_who_asked_do_not_change_the_key(change):
    assert cachemod.key("prj_1", "chat", QUESTION) == cachemod.key("prj_1", "chat", {**QUESTION, **change})


def test_another_project_or_another_api_shape_never_shares_a_key():
    base = cachemod.key("prj_1", "chat", QUESTION)
    assert cachemod.key("prj_2", "chat", QUESTION) != base
    assert cachemod.key("prj_1", "messages", QUESTION) != base


# -- get, put, TTL, bounds ----------------------------------------------------------

def test_the_same_request_asked_again_is_answered_from_the_cache():
    cache = AnswerCache(1 << 20, 1 << 16)
    k = cachemod.key("prj_1", "chat", QUESTION)
    assert cache.get(k, 1000.0) is None
    assert cache.put(k, entry())
    again = cache.get(cachemod.key("prj_1", "chat", dict(QUESTION)), 1001.0)
    assert again is not None and orjson.loads(replay_json(again, "chat")) == ANSWER


def test_a_request_with_other_sampling_settings_misses():
    cache = AnswerCache(1 << 20, 1 << 16)
    cache.put(cachemod.key("prj_1", "chat", QUESTION), entry())
    assert cache.get(cachemod.key("prj_1", "chat", {**QUESTION, "temperature": 1.0}), 1001.0) is None


def test_an_answer_is_reused_until_its_ttl_and_not_after():
    cache = AnswerCache(1 << 20, 1 << 16)
    k = cachemod.key("prj_1", "chat", QUESTION)
    cache.put(k, entry(at=1000.0, ttl=60.0))
    assert cache.get(k, 1059.9) is not None
    assert cache.get(k, 1060.0) is None
    assert cache.entries == 0 and cache.bytes == 0


def test_age_says_whole_seconds_since_the_answer_was_first_given():
    e = entry(at=1000.0)
    assert hit_headers(e, 1042.7) == {"x-llmgw-cache": "hit", "Age": "42"}
    assert hit_headers(e, 1003.0, similarity=0.91234) == {
        "x-llmgw-cache": "similar", "x-llmgw-cache-similarity": "0.9123", "Age": "3"}


def test_past_max_bytes_the_answer_used_longest_ago_goes_first():
    one = entry()
    size = len(one.answer) + 32 + cachemod.ENTRY_OVERHEAD
    cache = AnswerCache(3 * size, 1 << 16)
    keys = [cachemod.key("prj_1", "chat", {**QUESTION, "seed": i}) for i in range(4)]
    for k in keys[:3]:
        assert cache.put(k, entry())
    assert cache.bytes == 3 * size
    cache.get(keys[0], 1001.0)  # used again: now the most recent
    cache.put(keys[3], entry())
    assert keys[1] not in cache
    assert all(k in cache for k in (keys[0], keys[2], keys[3]))
    assert cache.bytes == 3 * size and cache.entries == 3


def test_an_answer_over_max_entry_bytes_is_served_but_not_kept():
    long_answer = {**ANSWER, "choices": [{**ANSWER["choices"][0],
                                         "message": {"role": "assistant", "content": "x" * 5000}}]}
    cache = AnswerCache(1 << 20, 4096)
    k = cachemod.key("prj_1", "chat", QUESTION)
    assert cache.put(k, entry(long_answer)) is False
    assert cache.get(k, 1000.0) is None and cache.bytes == 0


def test_smaller_bounds_take_effect_at_once():
    cache = AnswerCache(1 << 20, 1 << 16)
    keys = [cachemod.key("prj_1", "chat", {**QUESTION, "seed": i}) for i in range(10)]
    for k in keys:
        cache.put(k, entry())
    cache.configure(max_bytes=cache.bytes // 2, max_entry_bytes=1 << 16)
    assert cache.entries == 5 and keys[-1] in cache and keys[0] not in cache
    cache.configure(max_bytes=1 << 20, max_entry_bytes=10)
    assert cache.entries == 0 and cache.bytes == 0


def test_a_cache_of_zero_bytes_keeps_nothing():
    cache = AnswerCache(0, 0)
    assert cache.put(b"k", entry()) is False


def test_outcomes_are_counted_for_the_metrics():
    cache = AnswerCache(1 << 20, 1 << 16)
    for result in ("hit", "hit", "similar", "miss", "bypass"):
        cache.note(result)
    assert (cache.hits, cache.similar_hits, cache.misses, cache.bypasses) == (2, 1, 1, 1)
    with pytest.raises(ValueError):
        cache.note("maybe")


# -- streamed and not: one answer ----------------------------------------------------

def test_a_streamed_answer_kept_is_replayed_whole_to_a_client_that_did_not_stream():
    streamed = replay_stream(entry(), "chat", include_usage=True)
    assembler = Assembler()
    assembler.feed_sse(streamed)
    kept = Entry.make("chat", assembler.answer(), stored_at=1000.0, ttl=60.0)
    assert orjson.loads(replay_json(kept, "chat")) == ANSWER


def test_a_whole_answer_kept_is_replayed_as_chunks_ending_with_done():
    events = sse_data(replay_stream(entry(), "chat"))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-abc123" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "reasoning_content": "Easy."}
    assert "".join(d.get("content") or "" for d in deltas) == "Paris."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert not any("usage" in c for c in chunks)  # not asked for with stream_options


def test_the_usage_event_comes_last_when_the_client_asked_for_it():
    chunks = sse_data(replay_stream(entry(), "chat", include_usage=True))[:-1]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == ANSWER["usage"]


def test_tool_calls_survive_a_stream_and_back():
    assembler = Assembler()
    assembler.feed_sse(replay_stream(entry(TOOL_ANSWER), "chat", include_usage=True))
    assert assembler.answer() == TOOL_ANSWER


def test_a_stream_assembled_piece_by_piece_gives_the_whole_answer():
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 5, "model": "qwen"}
    pieces = [{"role": "assistant", "content": ""}, {"content": "Par"}, {"content": "is."}]
    raw = b"".join(b"data: " + orjson.dumps({**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
                   + b"\n\n" for d in pieces)
    raw += b"data: " + orjson.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + b"\n\n"
    assembler = Assembler()
    assembler.feed_sse(raw)
    assert assembler.answer() is None  # no [DONE] yet: the engine may still be cut
    assembler.feed_sse(b"data: [DONE]\n\n")
    answer = assembler.answer()
    assert answer["choices"][0]["message"]["content"] == "Paris."
    assert answer["object"] == "chat.completion" and answer["id"] == "chatcmpl-x"


def test_a_stream_cut_by_an_error_event_is_never_kept():
    assembler = Assembler()
    assembler.feed_sse(replay_stream(entry(), "chat")[:-len(b"data: [DONE]\n\n")])
    assembler.feed_sse(b'data: {"error": {"message": "cut", "code": "upstream_cut"}}\n\ndata: [DONE]\n\n')
    assert assembler.answer() is None


def test_a_completions_answer_replays_as_text_completion_events():
    answer = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "qwen",
              "choices": [{"index": 0, "text": " Paris", "logprobs": None, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}}
    e = Entry.make("completions", answer, stored_at=0.0, ttl=60.0)
    assembler = Assembler()
    assembler.feed_sse(replay_stream(e, "completions", include_usage=True))
    assert assembler.answer() == answer


def test_an_anthropic_client_gets_a_message_streamed_or_not():
    request = {"model": "qwen", "max_tokens": 64, "messages": [{"role": "user", "content": "Capital of France?"}]}
    e = entry(api="messages")
    whole = orjson.loads(replay_json(e, "messages", model="qwen", request=request))
    assert whole["type"] == "message" and whole["model"] == "qwen"
    assert [b["type"] for b in whole["content"]] == ["text"]  # thinking only when the client asked for it
    assert whole["content"][0]["text"] == "Paris." and whole["stop_reason"] == "end_turn"
    events = sse_events(replay_stream(e, "messages", model="qwen", request=request))
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
    assert text == "Paris."
    delta = next(d for n, d in events if n == "message_delta")
    assert delta["usage"]["output_tokens"] == 3


def test_a_responses_client_gets_a_response_streamed_or_not():
    request = {"model": "qwen", "input": "Capital of France?"}
    e = entry(api="responses")
    whole = orjson.loads(replay_json(e, "responses", model="qwen", request=request))
    assert whole["object"] == "response" and whole["status"] == "completed"
    message = next(item for item in whole["output"] if item["type"] == "message")
    assert message["content"][0]["text"] == "Paris."
    events = sse_events(replay_stream(e, "responses", model="qwen", request=request))
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    assert "".join(d["delta"] for n, d in events if n == "response.output_text.delta") == "Paris."


def test_an_answer_is_replayed_only_in_the_shape_it_was_kept_for():
    with pytest.raises(ValueError):
        replay_json(entry(api="chat"), "messages")


# -- llmgw keys cache against a real control plane -------------------------------------

@pytest.fixture
def control_plane(tmp_path):
    from tests.support.servers import Server  # a real `llmgw server`

    server = Server(tmp_path, "cp1")
    done = server.init()
    assert done.returncode == 0, done.stderr
    server.start()
    yield server
    server.stop()


def test_keys_cache_turns_a_projects_cache_on_shows_it_and_turns_it_off(control_plane):
    s = control_plane
    assert s.ctl_json("keys", "create", "desk", "--project", "Acme/support/desk", "--create")["id"]

    shown = s.ctl_json("keys", "cache", "--project", "Acme/support/desk")
    assert shown["cache"]["enabled"] is False  # off by default

    on = s.ctl_json("keys", "cache", "--project", "Acme/support/desk", "--ttl", "24h", "--similar", "0.78")
    assert on["project"] == "Acme/support/desk"
    assert on["cache"] == {**on["cache"], "enabled": True, "ttl": 86400.0, "ttl_text": "1d", "similar": 0.78}

    told = s.ctl("keys", "cache", "--project", "Acme/support/desk")
    assert told.returncode == 0
    assert "reuses an answer for 1d" in told.stdout and "0.78 similarity" in told.stdout

    off = s.ctl_json("keys", "cache", "--project", "Acme/support/desk", "--off")
    assert off["cache"]["enabled"] is False
    assert "does not reuse answers" in s.ctl("keys", "cache", "--project", "Acme/support/desk").stdout

    audit = s.ctl_json("ctl", "audit", "--target", f"project:{on['project_id']}")
    changes = [(e["action"], e["before"]["enabled"], e["after"]["enabled"]) for e in audit]
    assert changes == [("cache.set", True, False), ("cache.set", False, True)]  # newest first
    assert audit[1]["after"]["similar"] == 0.78 and audit[1]["via"] == "cli"


def test_keys_cache_refuses_what_cannot_be_meant_with_a_sentence(control_plane):
    s = control_plane
    s.ctl_json("keys", "create", "desk", "--project", "Acme/support/desk", "--create")
    cases = [
        (("--similar", "0.9"), "--similar goes with --ttl"),
        (("--ttl", "1h", "--off"), "not both"),
        (("--ttl", "soon"), "--ttl"),
        (("--ttl", "100ms"), "at least 1s"),
    ]
    for flags, said in cases:
        done = s.ctl("keys", "cache", "--project", "Acme/support/desk", *flags)
        assert done.returncode == 1, (flags, done.stdout)
        assert said in done.stderr, (flags, done.stderr)
    done = s.ctl("keys", "cache", "--project", "Acme/support/nope", "--ttl", "1h")
    assert done.returncode == 1 and "no project Acme/support/nope" in done.stderr
    assert s.ctl("keys", "cache", "--project", "Acme/support/desk", "--similar", "1.5").returncode == 2
    assert json.loads(s.ctl("keys", "cache", "--project", "Acme/support/desk", "--json").stdout)["cache"][
        "enabled"] is False
