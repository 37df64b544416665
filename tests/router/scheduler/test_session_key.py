"""Which conversation a request belongs to, from its header, its user or how it began."""

from __future__ import annotations

from multidict import CIMultiDict

from llmgw.router.scheduler import session_key

SYSTEM = {"role": "system", "content": "You answer questions about the handbook."}


def chat(*messages, **extra):
    return {"model": "llama", "messages": list(messages), **extra}


def test_the_clients_session_header_decides_over_everything_else():
    body = chat(SYSTEM, {"role": "user", "content": "hi"}, user="ayse")
    assert session_key(body, CIMultiDict({"X-LLMGW-Session": "abc"})) == session_key({}, {"x-llmgw-session": "abc"})
    assert session_key(body, {"X-Llmgw-Session": "abc"}) == session_key({}, {"x-llmgw-session": "abc"})
    assert session_key(body, {"x-llmgw-session": "abc"}) != session_key(body, {})


def test_requests_of_one_user_share_a_key():
    assert session_key(chat({"role": "user", "content": "a"}, user="ayse"), {}) == \
        session_key(chat({"role": "user", "content": "b"}, user="ayse"), {})
    anthropic = {"model": "claude", "messages": [{"role": "user", "content": "a"}], "metadata": {"user_id": "ayse"}}
    assert session_key(anthropic, {}) is not None


def test_every_turn_of_a_conversation_has_the_key_of_its_first():
    first = chat(SYSTEM, {"role": "user", "content": "Where is the leave policy?"})
    third = chat(SYSTEM, {"role": "user", "content": "Where is the leave policy?"},
                 {"role": "assistant", "content": "In chapter 4."},
                 {"role": "user", "content": "And for part-timers?"})
    assert session_key(first, {}) == session_key(third, {})


def test_conversations_that_begin_differently_have_different_keys():
    one = chat(SYSTEM, {"role": "user", "content": "Where is the leave policy?"})
    other = chat(SYSTEM, {"role": "user", "content": "Who approves expenses?"})
    assert session_key(one, {}) != session_key(other, {})


def test_the_key_gives_away_neither_the_prompt_nor_the_user():
    key = session_key(chat({"role": "user", "content": "my salary is 5000"}), {})
    assert "salary" not in key
    assert "ayse" not in session_key(chat(user="ayse@example.com"), {})


def test_responses_and_completions_requests_have_keys_too():
    assert session_key({"model": "m", "input": "hello", "instructions": "be brief"}, {}) is not None
    head = "x" * 5000
    assert session_key({"model": "m", "prompt": head + "turn one"}, {}) == \
        session_key({"model": "m", "prompt": head + "turn one, and turn two"}, {})


def test_a_request_that_says_nothing_of_a_conversation_has_no_key():
    assert session_key({"model": "m", "input": []}, {}) is None
    assert session_key({"model": "m"}, None) is None
