"""An Anthropic Messages request becomes the chat request the engines take."""

from __future__ import annotations

import orjson
import pytest

from llmgw.router.translate.anthropic import anthropic_error, messages_to_chat
from llmgw.router.translate.common import TranslateError


def translate(body: dict, thinking_mode: str = "") -> dict:
    return messages_to_chat(body, upstream_model="Qwen/Qwen3-8B", thinking_mode=thinking_mode)


def ask(messages, **fields) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages, **fields}


def refusal(body: dict, thinking_mode: str = "") -> TranslateError:
    with pytest.raises(TranslateError) as caught:
        translate(body, thinking_mode)
    return caught.value


def test_a_plain_question_becomes_a_chat_request_for_the_engines_model():
    chat = translate(ask([{"role": "user", "content": "Hello"}]))
    assert chat == {"model": "Qwen/Qwen3-8B", "max_tokens": 1024,
                    "messages": [{"role": "user", "content": "Hello"}]}


def test_the_system_prompt_comes_first_whether_a_string_or_text_blocks():
    as_string = translate(ask([{"role": "user", "content": "Hi"}], system="Be brief."))
    as_blocks = translate(ask([{"role": "user", "content": "Hi"}],
                              system=[{"type": "text", "text": "Be brief."},
                                      {"type": "text", "text": "Answer in French.", "cache_control": {
                                          "type": "ephemeral"}}]))
    assert as_string["messages"][0] == {"role": "system", "content": "Be brief."}
    assert as_blocks["messages"][0] == {"role": "system", "content": "Be brief.\nAnswer in French."}
    assert as_blocks["messages"][1] == {"role": "user", "content": "Hi"}


def test_text_blocks_of_a_user_turn_are_joined_into_one_string():
    chat = translate(ask([{"role": "user", "content": [{"type": "text", "text": "<reminder>x</reminder>"},
                                                       {"type": "text", "text": "Fix the bug"}]}]))
    assert chat["messages"] == [{"role": "user", "content": "<reminder>x</reminder>\nFix the bug"}]


def test_images_become_image_url_parts_from_base64_and_from_a_url():
    chat = translate(ask([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]}]))
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]


def test_an_assistant_tool_use_becomes_a_tool_call_with_json_string_arguments():
    chat = translate(ask([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18°C"}]},
    ]))
    assistant = chat["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me check."
    assert assistant["tool_calls"] == [{"id": "toolu_01", "type": "function",
                                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]
    assert orjson.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "toolu_01", "content": "18°C"}


def test_thinking_from_earlier_turns_is_not_sent_to_the_engine():
    chat = translate(ask([
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "easy", "signature": ""},
                                          {"type": "redacted_thinking", "data": "xyz"},
                                          {"type": "text", "text": "4"}]},
        {"role": "user", "content": "and 3+3?"},
    ]))
    assert chat["messages"][1] == {"role": "assistant", "content": "4"}
    assert "easy" not in orjson.dumps(chat).decode()


def test_an_assistant_turn_of_only_tool_calls_has_no_content():
    chat = translate(ask([
        {"role": "user", "content": "ls"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]},
    ]))
    assert chat["messages"][1]["content"] is None
    assert chat["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_tool_results_come_before_the_rest_of_the_user_turn():
    chat = translate(ask([
        {"role": "user", "content": "Run both"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}},
                                          {"type": "tool_use", "id": "b", "name": "y", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "one"},
                                                                     {"type": "text", "text": "two"}]},
            {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": True},
            {"type": "text", "text": "Now summarise."},
        ]},
    ]))
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "one\ntwo"},
        {"role": "tool", "tool_call_id": "b", "content": "Error: boom"},
        {"role": "user", "content": "Now summarise."},
    ]


def test_an_image_a_tool_returned_reaches_the_model_in_a_user_turn_after_the_tool_messages():
    chat = translate(ask([
        {"role": "user", "content": "Screenshot please"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "s1", "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s1", "content": [
            {"type": "text", "text": "captured"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}]}]},
    ]))
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "s1", "content": "captured"}
    follow = chat["messages"][3]
    assert follow["role"] == "user"
    assert "s1" in follow["content"][0]["text"]
    assert follow["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/"}}


def test_tools_become_function_tools_and_tool_choice_maps_to_its_chat_name():
    tools = [{"name": "get_weather", "description": "Weather for a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    body = ask([{"role": "user", "content": "Paris?"}], tools=tools)
    assert translate(body)["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city", "parameters": tools[0]["input_schema"]}}]
    choices = {"auto": "auto", "any": "required", "none": "none"}
    for kind, expected in choices.items():
        assert translate({**body, "tool_choice": {"type": kind}})["tool_choice"] == expected
    named = translate({**body, "tool_choice": {"type": "tool", "name": "get_weather",
                                                "disable_parallel_tool_use": True}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert named["parallel_tool_calls"] is False


def test_sampling_settings_pass_through_with_their_chat_names():
    chat = translate(ask([{"role": "user", "content": "x"}], temperature=0.2, top_p=0.9, top_k=40,
                         stop_sequences=["</answer>"], metadata={"user_id": "u-42"}))
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (0.2, 0.9, 40)
    assert chat["stop"] == ["</answer>"]
    assert chat["user"] == "u-42"


def test_a_streamed_request_asks_the_engine_for_its_usage_at_the_end():
    chat = translate(ask([{"role": "user", "content": "x"}], stream=True))
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}


def test_thinking_tells_a_chat_template_model_to_think_or_not():
    on = translate(ask([{"role": "user", "content": "x"}], thinking={"type": "enabled", "budget_tokens": 2048}),
                   "chat_template_kwargs")
    off = translate(ask([{"role": "user", "content": "x"}], thinking={"type": "disabled"}), "chat_template_kwargs")
    assert on["chat_template_kwargs"] == {"enable_thinking": True}
    assert off["chat_template_kwargs"] == {"enable_thinking": False}


def test_thinking_budget_picks_the_reasoning_effort_for_a_model_that_takes_one():
    def effort(budget):
        chat = translate(ask([{"role": "user", "content": "x"}], max_tokens=64000,
                             thinking={"type": "enabled", "budget_tokens": budget}), "reasoning_effort")
        return chat["reasoning_effort"]
    assert [effort(b) for b in (1024, 4095, 4096, 16383, 16384, 31999)] == \
        ["low", "low", "medium", "medium", "high", "high"]
    adaptive = translate(ask([{"role": "user", "content": "x"}], thinking={"type": "adaptive"}), "reasoning_effort")
    assert adaptive["reasoning_effort"] == "medium"
    disabled = translate(ask([{"role": "user", "content": "x"}], thinking={"type": "disabled"}), "reasoning_effort")
    assert "reasoning_effort" not in disabled


def test_thinking_is_not_passed_on_for_a_model_that_cannot_be_told():
    chat = translate(ask([{"role": "user", "content": "x"}], thinking={"type": "enabled", "budget_tokens": 2048}))
    assert "chat_template_kwargs" not in chat and "reasoning_effort" not in chat


@pytest.mark.parametrize("body, words, param", [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens is required", "max_tokens"),
    ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "positive integer",
     "max_tokens"),
    ({"model": "m", "max_tokens": "100", "messages": [{"role": "user", "content": "x"}]}, "positive integer",
     "max_tokens"),
    ({"model": "m", "max_tokens": 10}, "messages must be a non-empty array", "messages"),
    ({"model": "m", "max_tokens": 10, "messages": []}, "messages must be a non-empty array", "messages"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]}, "role", "messages.0.role"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": 7}]}, "got a number",
     "messages.0.content"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
     "unknown content block type 'hologram'", "messages.0.content.0.type"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "x"}}]}]},
     "documents", "messages.0.content.0.type"),
    ({"model": "m", "max_tokens": 10, "temperature": "hot", "messages": [{"role": "user", "content": "x"}]},
     "temperature must be a number", "temperature"),
    ({"model": "m", "max_tokens": 10, "stop_sequences": "END", "messages": [{"role": "user", "content": "x"}]},
     "array of strings", "stop_sequences"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "'web_search_20250305' runs at Anthropic",
     "tools.0.type"),
    ({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
      "thinking": {"type": "enabled"}}, "budget_tokens", "thinking.budget_tokens"),
])
def test_a_request_the_engines_cannot_take_is_refused_with_a_sentence_naming_the_field(body, words, param):
    error = refusal(body)
    assert words in error.message
    assert error.param == param
    assert isinstance(error, ValueError)


def test_an_error_body_has_anthropics_shape_and_the_type_its_status_means():
    from anthropic.types.shared import ErrorResponse

    expected = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                503: "overloaded_error", 529: "overloaded_error", 502: "api_error", 422: "invalid_request_error"}
    for status, kind in expected.items():
        body = anthropic_error(status, "max_tokens is required")
        assert body == {"type": "error", "error": {"type": kind, "message": "max_tokens is required"}}
        if kind != "request_too_large":
            # The SDK's union of error objects predates Anthropic's documented
            # request_too_large; the SDK still raises by status for it.
            ErrorResponse.model_validate(body)
