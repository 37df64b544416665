"""A Responses request (what Codex sends) becomes the chat request the engines take."""

from __future__ import annotations

import pytest

from llmgw.router.translate.common import TranslateError
from llmgw.router.translate.responses import hosted_tools, responses_to_chat


def translate(body: dict, thinking_mode: str = "reasoning_effort") -> dict:
    return responses_to_chat(body, upstream_model="openai/gpt-oss-20b", thinking_mode=thinking_mode)


def refusal(body: dict) -> TranslateError:
    with pytest.raises(TranslateError) as caught:
        translate(body)
    return caught.value


def test_a_string_input_with_instructions_becomes_a_system_and_a_user_message():
    chat = translate({"model": "gpt-oss", "instructions": "You are Codex.", "input": "List the files"})
    assert chat == {"model": "openai/gpt-oss-20b", "messages": [
        {"role": "system", "content": "You are Codex."}, {"role": "user", "content": "List the files"}]}


def test_developer_messages_before_the_conversation_join_the_system_message():
    chat = translate({"instructions": "Base.", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "<env>cwd=/src</env>"},
                                     {"type": "input_text", "text": "fix it"}]},
        {"type": "message", "role": "developer", "content": "Later note."},
    ]})
    assert chat["messages"] == [
        {"role": "system", "content": "Base.\n\nSandbox: none."},
        {"role": "user", "content": "<env>cwd=/src</env>\nfix it"},
        {"role": "system", "content": "Later note."},
    ]


def test_an_image_part_becomes_an_image_url_part():
    chat = translate({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "high"}]}]})
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"}}]


def test_function_calls_join_the_assistant_turn_before_them_and_outputs_become_tool_messages():
    chat = translate({"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run tests"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell",
         "arguments": '{"command": ["pytest"]}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "shell",
         "arguments": '{"command": ["ls"]}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "3 passed"},
        {"type": "function_call_output", "call_id": "call_b",
         "output": [{"type": "input_text", "text": "a.py"}, {"type": "input_text", "text": "b.py"}]},
        {"type": "function_call", "call_id": "call_c", "name": "shell", "arguments": "{}"},
    ]})
    assert chat["messages"] == [
        {"role": "user", "content": "run tests"},
        {"role": "assistant", "content": "Running.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["pytest"]}'}},
            {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls"]}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "3 passed"},
        {"role": "tool", "tool_call_id": "call_b", "content": "a.py\nb.py"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_c", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
    ]
    assert "hmm" not in str(chat)


def test_an_image_in_a_functions_output_follows_the_run_of_tool_messages_as_a_user_turn():
    chat = translate({"input": [
        {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_image", "image_url": "https://x/1.png"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "none"},
    ]})
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["assistant", "tool", "tool", "user"]
    assert chat["messages"][3]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/1.png"}}


def test_function_tools_in_the_flat_shape_become_chats_nested_functions():
    tools = [{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
              "parameters": {"type": "object", "properties": {"command": {"type": "array"}}}},
             {"type": "function", "name": "noargs", "parameters": None}]
    chat = translate({"input": "x", "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False})
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "shell", "description": "Run a command", "strict": False,
                                          "parameters": tools[0]["parameters"]}},
        {"type": "function", "function": {"name": "noargs", "parameters": {"type": "object", "properties": {}}}}]
    assert chat["tool_choice"] == "auto"
    assert chat["parallel_tool_calls"] is False
    named = translate({"input": "x", "tools": tools, "tool_choice": {"type": "function", "name": "shell"}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "shell"}}


def test_settings_pass_through_with_their_chat_names():
    chat = translate({"input": "x", "max_output_tokens": 512, "temperature": 0.1, "top_p": 0.95, "stream": True,
                      "store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
                      "text": {"verbosity": "low"}, "safety_identifier": "person-7"})
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"]) == (512, 0.1, 0.95)
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["user"] == "person-7"
    assert "response_format" not in chat


def test_reasoning_effort_passes_to_a_model_that_takes_one_within_the_three_it_knows():
    efforts = {e: translate({"input": "x", "reasoning": {"effort": e, "summary": "auto"}}).get("reasoning_effort")
               for e in ("none", "minimal", "low", "medium", "high", "xhigh")}
    assert efforts == {"none": None, "minimal": "low", "low": "low", "medium": "medium", "high": "high",
                       "xhigh": "high"}


def test_reasoning_effort_turns_a_chat_template_models_thinking_on_or_off():
    on = translate({"input": "x", "reasoning": {"effort": "high"}}, "chat_template_kwargs")
    off = translate({"input": "x", "reasoning": {"effort": "none"}}, "chat_template_kwargs")
    assert on["chat_template_kwargs"] == {"enable_thinking": True}
    assert off["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning_effort" not in on
    assert "chat_template_kwargs" not in translate({"input": "x", "reasoning": {"effort": "high"}}, "")


def test_a_json_schema_text_format_becomes_a_response_format():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    chat = translate({"input": "x", "text": {"format": {"type": "json_schema", "name": "count", "schema": schema,
                                                        "strict": True}}})
    assert chat["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "count", "schema": schema, "strict": True}}
    assert translate({"input": "x", "text": {"format": {"type": "json_object"}}})["response_format"] == \
        {"type": "json_object"}


def test_previous_response_id_is_refused_with_a_sentence_saying_to_send_the_whole_conversation():
    error = refusal({"input": "and then?", "previous_response_id": "resp_123"})
    assert error.param == "previous_response_id"
    assert "send the whole conversation" in error.message


@pytest.mark.parametrize("body, words, param", [
    ({"model": "m"}, "input is required", "input"),
    ({"input": []}, "non-empty array", "input"),
    ({"input": "x", "tools": [{"type": "local_shell"}]}, "tools of type 'local_shell' are not supported",
     "tools.0.type"),
    ({"input": "x", "tools": [{"type": "namespace", "name": "crm", "tools": []}]}, "non-empty array",
     "tools.0.tools"),
    ({"input": "x", "tools": [{"type": "namespace", "name": "crm", "tools": [{"type": "web_search"}]}]},
     "function tools only", "tools.0.tools.0.type"),
    ({"input": "x", "tools": [{"type": "function", "name": "crm__find"},
                              {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]}]},
     "two tools are called crm__find", "tools.1.tools.0.name"),
    ({"input": "x", "conversation": "conv_1"}, "send the whole conversation", "conversation"),
    ({"input": "x", "background": True}, "background", "background"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference", "input.0.type"),
    ({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "x"}]},
     "'custom_tool_call' are not supported", "input.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file",
     "input.0.content.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]}, "file_id",
     "input.0.content.0.file_id"),
    ({"input": [{"role": "robot", "content": "x"}]}, "role", "input.0.role"),
    ({"input": "x", "max_output_tokens": -1}, "positive integer", "max_output_tokens"),
    ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort", "reasoning.effort"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "call_id", "input.0.call_id"),
])
def test_a_request_the_engines_cannot_take_is_refused_with_a_sentence_naming_the_field(body, words, param):
    error = refusal(body)
    assert words in error.message
    assert error.param == param



@pytest.mark.parametrize("responses_tools, messages_tools, words, param", [
    ({"name": "shell"}, {"name": "shell"}, "tools must be an array, got an object", "tools"),
    (["shell"], ["shell"], "tools.0 must be an object, got a string", "tools.0"),
    # Each API's own kind of tool, without a name.
    ([{"type": "function", "name": ""}], [{"name": "", "input_schema": {}}], "tools.0 needs a name", "tools.0.name"),
])
def test_a_malformed_tools_list_is_refused_in_the_same_words_by_the_responses_and_the_messages_api(
        responses_tools, messages_tools, words, param):
    from llmgw.router.translate.anthropic import messages_to_chat

    responses = refusal({"input": "x", "tools": responses_tools})
    with pytest.raises(TranslateError) as messages:
        messages_to_chat({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
                          "tools": messages_tools}, upstream_model="m", thinking_mode="chat_template_kwargs")
    for error in (responses, messages.value):
        assert (error.message, error.param) == (words, param)


# What Codex 0.171 sends on every turn: functions, a namespace of them, and OpenAI's web search.
CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for spawning and managing sub-agents.",
     "tools": [{"type": "function", "name": "close_agent", "description": "Close an agent", "strict": False,
                "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}},
               {"type": "function", "name": "wait_agent", "strict": False}]},
    {"type": "namespace", "name": "mcp__docs__", "description": "An MCP server's tools.",
     "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}]},
    {"type": "web_search", "external_web_access": False},
]


def test_a_namespaces_functions_reach_the_engine_as_functions_named_under_the_namespace():
    chat = translate({"input": "hi", "tools": CODEX_TOOLS, "tool_choice": "auto"})

    assert [t["function"]["name"] for t in chat["tools"]] == [
        "exec_command", "multi_agent_v1__close_agent", "multi_agent_v1__wait_agent", "mcp__docs__search"]
    assert chat["tools"][1]["function"]["description"] == "Close an agent"
    assert chat["tools"][2]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert chat["tool_choice"] == "auto"


def test_tools_that_run_at_openai_are_left_out_of_what_the_engine_sees_and_named():
    body = {"input": "hi", "tools": CODEX_TOOLS + [{"type": "code_interpreter", "container": {"type": "auto"}},
                                                  {"type": "web_search_preview"}]}

    chat = translate(body)

    assert all(t["type"] == "function" for t in chat["tools"]) and len(chat["tools"]) == 4
    assert hosted_tools(body) == ["web_search", "code_interpreter", "web_search_preview"]
    only_hosted = translate({"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "auto"})
    assert "tools" not in only_hosted and "tool_choice" not in only_hosted


@pytest.mark.parametrize("kind", [["a", 1, None, {}], {"web_search": True}, 7, None])
def test_a_tool_whose_type_is_not_a_string_is_refused_naming_the_field_not_failed_inside(kind):
    # The fuzz's case: a list as a tool's type reached a set lookup, which cannot hash it, and
    # the client got a 500 where the sentence about the field was due.
    body = {"input": "hi", "tools": [{"type": kind, "name": "x"}, {"type": "web_search"}]}

    assert hosted_tools(body) == ["web_search"]
    with pytest.raises(TranslateError) as refused:
        translate(body)
    assert refused.value.param == "tools.0.type"


def test_an_earlier_call_of_a_namespaced_function_is_named_as_the_engine_knows_it():
    chat = translate({"tools": CODEX_TOOLS, "input": [
        {"role": "user", "content": "close it"},
        {"type": "function_call", "call_id": "call_1", "namespace": "multi_agent_v1", "name": "close_agent",
         "arguments": '{"target":"a"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "closed"}],
        "tool_choice": {"type": "function", "namespace": "mcp__docs__", "name": "search"}})

    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "mcp__docs__search"}}
