"""The OpenAI endpoints' schemas: what real SDKs send passes, what does not fit is refused naming the field."""

from __future__ import annotations

import pytest

from llmgw.router import shapes


def chat(*messages: dict, **extra) -> dict:
    return {"model": "m", "messages": list(messages), **extra}


def user(content) -> dict:
    return {"role": "user", "content": content}


def refusal(api: str, body: dict) -> tuple[str, str]:
    with pytest.raises(shapes.ShapeError) as refused:
        shapes.check(api, body)
    return refused.value.message, refused.value.param


def test_what_the_openai_sdk_sends_passes():
    shapes.check("chat", chat(
        {"role": "developer", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "name": "ayse", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "file", "file": {"file_data": "AAAA", "filename": "a.pdf"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "found"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "reasoning_content": "hm"},
        {"role": "assistant", "function_call": {"name": "old", "arguments": "{}"}},
        {"role": "function", "name": "old", "content": "done"},
        tools=[{"type": "function", "function": {"name": "look", "description": "d", "parameters": {},
                                                 "strict": True}},
               {"type": "custom", "custom": {"name": "grammar", "description": "d", "format": {"type": "text"}}}],
        functions=[{"name": "old", "parameters": {}}], tool_choice={"type": "function", "function": {"name": "look"}},
        response_format={"type": "json_object"}, chat_template_kwargs={"enable_thinking": False},
        top_k=20, min_p=0.1))
    for prompt in ("x", ["a", "b"], [1, 2], [[1], [2, 3]]):
        shapes.check("completions", {"model": "m", "prompt": prompt, "suffix": "end"})
        shapes.check("embeddings", {"model": "m", "input": prompt})


@pytest.mark.parametrize("content, message, param", [
    ({"type": "text", "text": "x"}, "messages[0].content must be a string or an array of content parts, got an object",
     "messages[0].content"),
    ([{"text": "x"}], 'messages[0].content[0].type must be one of "text", "image_url", "input_audio", "file", '
                      '"video_url", "audio_url", got null', "messages[0].content[0].type"),
    ([{"type": "TEXT", "text": "x"}], 'messages[0].content[0].type must be one of "text", "image_url", '
                                      '"input_audio", "file", "video_url", "audio_url", got "TEXT"',
     "messages[0].content[0].type"),
    ([{"type": ["text"], "text": "x"}], None, "messages[0].content[0].type"),
    ([{"type": {"a": 1}, "text": "x"}], None, "messages[0].content[0].type"),
    (["x"], None, "messages[0].content[0]"),
    ([{"type": "text", "text": {"nested": "x"}}], "messages[0].content[0].text must be a string in a text part, "
                                                  "got an object", "messages[0].content[0].text"),
    ([{"type": "image_url", "image_url": "https://x/y.png"}], None, "messages[0].content[0].image_url"),
    ([{"type": "image_url", "image_url": {}}], "messages[0].content[0].image_url.url is required",
     "messages[0].content[0].image_url.url"),
])
def test_a_user_content_that_does_not_fit_is_refused_naming_where(content, message, param):
    said, named = refusal("chat", chat(user(content)))
    assert named == param
    if message is not None:
        assert said == message


def test_each_role_takes_only_its_own_parts():
    said, param = refusal("chat", chat({"role": "system",
                                        "content": [{"type": "image_url", "image_url": {"url": "x"}}]}))
    assert said == 'messages[0].content[0].type must be "text", got "image_url"'
    said, _ = refusal("chat", chat(user("hi"), {"role": "assistant", "content": [{"type": "image_url"}]}))
    assert said == 'messages[1].content[0].type must be "text" or "refusal", got "image_url"'


@pytest.mark.parametrize("body, param", [
    (chat(), "messages"),
    ({"messages": "hi"}, "messages"),
    (chat("hi"), "messages[0]"),
    (chat({"role": "robot", "content": "x"}), "messages[0].role"),
    (chat({"role": ["user"], "content": "x"}), "messages[0].role"),
    (chat({"role": "user"}), "messages[0].content"),
    (chat({"role": "user", "content": "x", "name": 3}), "messages[0].name"),
    (chat({"role": "tool", "content": "x"}), "messages[0].tool_call_id"),
    (chat({"role": "user", "content": "x", "tool_calls": []}), "messages[0].tool_calls"),
    (chat({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": {"a": 1}}}]}), "messages[0].tool_calls[0].function.arguments"),
    (chat({"role": "assistant", "tool_calls": [{"type": "web"}]}), "messages[0].tool_calls[0].type"),
    (chat(user("x"), tools={"a": 1}), "tools"),
    (chat(user("x"), tools=[{"type": "function", "function": {"description": "no name"}}]), "tools[0].function.name"),
    (chat(user("x"), tools=[{"type": "function", "function": {"name": "f", "description": ["x"]}}]),
     "tools[0].function.description"),
    (chat(user("x"), tools=[{"type": "web_search"}]), "tools[0].type"),
    (chat(user("x"), tools=[{"function": {"name": "f"}}]), "tools[0].type"),
    (chat(user("x"), tool_choice=3), "tool_choice"),
    (chat(user("x"), chat_template="{{ 'anything' }}"), "chat_template"),
    (chat(user("x"), chat_template_kwargs="x"), "chat_template_kwargs"),
    (chat(user("x"), documents=["x"]), "documents[0]"),
])
def test_a_chat_body_that_does_not_fit_is_refused_naming_the_field(body, param):
    said, named = refusal("chat", body)
    assert named == param and said.lstrip('"').startswith(param)


def test_a_completions_prompt_or_embeddings_input_of_the_wrong_kind_is_refused():
    for prompt in ({"text": "x"}, [], ["a", 1], [[1], "a"], [True], [[]], None):
        assert refusal("completions", {"prompt": prompt})[1] == "prompt"
        assert refusal("embeddings", {"input": prompt})[1] == "input"
    assert refusal("completions", {"prompt": "x", "suffix": ["y"]}) == ("suffix must be a string, got an array",
                                                                         "suffix")
    assert refusal("embeddings", {"input": "x", "messages": []})[1] == "messages"


def test_anthropic_and_responses_bodies_are_left_to_their_translators():
    shapes.check("messages", {"messages": {"odd": True}})
    shapes.check("responses", {"input": {"odd": True}})
