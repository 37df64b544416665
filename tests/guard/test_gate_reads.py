"""The input scan reads every string the engine will read: each way a secret was smuggled past it, tried again."""

from __future__ import annotations

import json

import pytest

from llmgw.config.guard import Pattern, Policy, Rules
from llmgw.config.loader import from_dict
from llmgw.guard.gate import check_input
from llmgw.guard.policy import baseline_policy, combine_policies

TOKEN = "ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s"


def baseline():
    return combine_policies([("baseline", from_dict(Policy, baseline_policy()))])


def effective(**policy):
    return combine_policies([("p", Policy(**policy))])


def ask(**extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hello"}], **extra}


def refused_rule(body: dict, api: str = "chat", policy=None) -> str | None:
    result = check_input(policy or baseline(), body, api)
    if result.refusal is None:
        assert TOKEN not in json.dumps(result.body)  # not refused: then it must not be there at all
        return None
    assert TOKEN not in result.refusal.message
    return result.refusal.rule


@pytest.mark.parametrize("body", [
    pytest.param(ask(tools=[{"type": "function", "function": {
        "name": "lookup", "description": f"use the key {TOKEN}", "parameters": {"type": "object"}}}]),
        id="a tool's description"),
    pytest.param(ask(tools=[{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "enum": [TOKEN]}}}}}]),
        id="a tool's parameter schema"),
    pytest.param(ask(tools=[{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {TOKEN: {"type": "string"}}}}}]),
        id="a schema's property name"),
    pytest.param({"messages": [{"role": "user", "name": TOKEN, "content": "hi"}]}, id="a message's name"),
    pytest.param({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "my key is " + TOKEN[:20]}, {"type": "text", "text": TOKEN[20:] + " ok"}]}]},
        id="split across two text parts"),
    pytest.param({"messages": [{"role": "user", "content": [{"text": TOKEN}]}]}, id="a part with no type"),
    pytest.param({"messages": [{"role": "user", "content": [{"type": "TEXT", "text": TOKEN}]}]},
                 id="a part of type TEXT"),
    pytest.param({"messages": [{"role": "user", "content": {"type": "text", "text": TOKEN}}]},
                 id="content given as an object"),
    pytest.param({"messages": [{"role": "assistant", "content": None, "tool_calls": [{
        "id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"k": TOKEN})}}]}]},
        id="an earlier tool call's arguments"),
    pytest.param({"messages": [{"role": "tool", "tool_call_id": TOKEN, "content": "ok"}]}, id="a tool call's id"),
    pytest.param({"messages": [{"role": "assistant", "content": "x", "reasoning_content": TOKEN}]},
                 id="an earlier turn's reasoning"),
    pytest.param(ask(response_format={"type": "json_schema", "json_schema": {
        "name": "out", "schema": {"description": TOKEN}}}), id="a response format's schema"),
    pytest.param(ask(chat_template_kwargs={"model_identity": TOKEN}), id="the chat template's arguments"),
])
def test_a_token_the_baseline_blocks_is_blocked_wherever_the_engine_would_read_it(body):
    assert refused_rule(body) == "secrets:github"


def test_a_completions_suffix_and_each_prompt_of_a_list_are_read():
    assert refused_rule({"prompt": "def f():", "suffix": f"# {TOKEN}"}, "completions") == "secrets:github"
    assert refused_rule({"prompt": ["fine", f"k={TOKEN}"]}, "completions") == "secrets:github"
    assert refused_rule({"input": ["fine", f"k={TOKEN}"]}, "embeddings") == "secrets:github"


def test_anthropic_and_responses_bodies_as_the_client_sent_them_are_read_whole():
    assert refused_rule({"system": [{"type": "text", "text": TOKEN}], "messages": []}, "messages") == "secrets:github"
    assert refused_rule({"messages": [], "tools": [{"name": "t", "description": TOKEN, "input_schema": {}}]},
                        "messages") == "secrets:github"
    assert refused_rule({"input": [{"type": "function_call_output", "call_id": "c", "output": TOKEN}]},
                        "responses") == "secrets:github"
    assert refused_rule({"instructions": TOKEN, "input": "hi"}, "responses") == "secrets:github"


def test_a_prompt_of_token_ids_is_refused_by_a_policy_that_reads_prompts_and_passed_by_one_that_only_watches():
    result = check_input(baseline(), {"prompt": [1, 2, 3]}, "completions")
    assert result.refusal is not None and result.refusal.rule == "token_ids"
    assert "prompt is given as token ids" in result.refusal.message
    assert check_input(baseline(), {"input": [[1, 2], [3]]}, "embeddings").refusal.rule == "token_ids"
    watching = check_input(effective(mode="observe", input=Rules(secrets="block")), {"prompt": [1, 2]}, "completions")
    assert watching.refusal is None
    assert [d.as_dict() for d in watching.decisions] == [
        {"rule": "token_ids", "action": "would_block", "direction": "input"}]


def test_a_value_split_across_parts_is_redacted_with_its_placeholder_where_it_began():
    policy = effective(input=Rules(pii={"email": "redact"}))
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "write to ayse@exa"}, {"type": "image_url", "image_url": {"url": "data:x"}},
        {"type": "text", "text": "mple.com today"}]}]}
    result = check_input(policy, body, "chat")
    parts = result.body["messages"][0]["content"]
    assert [p.get("text") for p in parts] == ["write to [EMAIL_1]", None, " today"]
    assert parts[1] == body["messages"][0]["content"][1]
    assert result.redactor.restore("[EMAIL_1]") == "ayse@example.com"
    assert body["messages"][0]["content"][0]["text"] == "write to ayse@exa"  # the caller's body is not changed


def test_a_value_split_where_the_engine_puts_a_newline_is_found_too():
    policy = effective(input=Rules(secrets="redact"))
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Authorization: Bearer"}, {"type": "text", "text": "abcdefghijklmnopqrstuvwx"}]}]}
    parts = check_input(policy, body, "chat").body["messages"][0]["content"]
    assert [p["text"] for p in parts] == ["Authorization: Bearer", "[SECRET_1]"]


def test_values_within_one_part_are_redacted_once_and_parts_that_do_not_meet_are_left_alone():
    policy = effective(input=Rules(pii={"email": "redact"}))
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a@b.io and"}, {"type": "text", "text": "nothing else"}]}]}
    result = check_input(policy, body, "chat")
    assert [p["text"] for p in result.body["messages"][0]["content"]] == ["[EMAIL_1] and", "nothing else"]
    assert len(result.redactor) == 1


def test_a_tool_description_is_redacted_and_a_tool_name_to_redact_refuses_instead():
    policy = effective(input=Rules(pii={"email": "redact"}))
    described = ask(tools=[{"type": "function", "function": {"name": "mail", "description": "mails ops@example.com"}}])
    result = check_input(policy, described, "chat")
    assert result.body["tools"][0]["function"] == {"name": "mail", "description": "mails [EMAIL_1]"}
    named = ask(tools=[{"type": "function", "function": {"name": "ops@example.com"}}])
    refusal = check_input(policy, named, "chat").refusal
    assert refusal is not None and refusal.rule == "pii:email"


def test_a_message_name_is_redacted_like_its_content():
    policy = effective(input=Rules(deny=[Pattern("codename", r"kestrel", "redact")]))
    body = {"messages": [{"role": "user", "name": "kestrel", "content": "hi"}]}
    assert check_input(policy, body, "chat").body["messages"][0]["name"] == "[REDACTED_1]"


def test_a_part_whose_type_is_a_list_or_an_object_is_read_not_a_crash():
    for kind in (["text"], {"a": 1}, None, 3):
        body = {"messages": [{"role": "user", "content": [{"type": kind, "text": TOKEN}]}]}
        assert refused_rule(body) == "secrets:github"


def test_a_schema_nested_thousands_deep_is_read_without_running_out_of_stack():
    schema: dict = {"description": TOKEN}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"p": schema}}
    assert refused_rule(ask(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])) \
        == "secrets:github"


def test_the_judge_reads_the_latest_user_turn_as_one_text_not_its_name_or_tools():
    policy = effective(input=Rules(cards="redact"))
    body = {"messages": [{"role": "user", "content": "first"},
                         {"role": "user", "name": "bob", "content": [{"type": "text", "text": "card 4111 1111"},
                                                                     {"type": "text", "text": " 1111 1111 ok"}]}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "last string of all"}}]}
    assert check_input(policy, body, "chat").last_user == "card [CARD_1]\n ok"


def many_tools(description_of_the_last: str) -> list[dict]:
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "reads a file",
                                               "parameters": {"type": "object", "properties": {
                                                   "path": {"type": "string", "description": "where"}}}}}
             for i in range(30)]
    tools[-1]["function"]["description"] = description_of_the_last
    return tools


def test_among_hundreds_of_schema_strings_the_one_with_a_finding_is_still_found_and_redacted_where_it_is():
    assert refused_rule(ask(tools=many_tools(f"key {TOKEN}"))) == "secrets:github"
    policy = effective(input=Rules(pii={"email": "redact"}))
    result = check_input(policy, ask(tools=many_tools("mails ops@example.com")), "chat")
    assert result.body["tools"][-1]["function"]["description"] == "mails [EMAIL_1]"
    assert result.body["tools"][0] == many_tools("")[0]


def test_a_sites_pattern_anchored_to_a_whole_string_still_finds_it_among_many():
    policy = effective(input=Rules(deny=[Pattern("codename", r"^kestrel$")]))
    refusal = check_input(policy, ask(tools=many_tools("kestrel")), "chat").refusal
    assert refusal is not None and refusal.rule == "deny:codename"


# A call id whose digits pass the Luhn check, as an engine's counter can make one (issue 25, item 21).
CARD_LIKE_ID = "call_4111111111111111"


def _agent_turn(call_id: str) -> dict:
    """The second turn of a tool-calling agent: its call, the tool's result under the call's id, in chat."""
    return {"model": "m", "messages": [
        {"role": "user", "content": "what is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]}


def test_a_tool_call_id_that_looks_like_a_card_number_is_not_refused_by_the_card_rule():
    result = check_input(baseline(), _agent_turn(CARD_LIKE_ID), "chat")

    assert result.refusal is None and result.decisions == []
    assert result.body["messages"][1]["tool_calls"][0]["id"] == CARD_LIKE_ID
    assert result.body["messages"][2]["tool_call_id"] == CARD_LIKE_ID


def test_responses_items_ids_that_look_like_card_numbers_are_not_refused():
    body = {"model": "m", "input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "id": "fc_5105105105105100", "call_id": CARD_LIKE_ID, "name": "weather",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": CARD_LIKE_ID, "output": "sunny"}]}

    assert check_input(baseline(), body, "responses").refusal is None


def test_a_card_number_in_a_tool_result_is_still_masked_and_a_secret_in_an_id_still_refused():
    turn = _agent_turn("call_1")
    turn["messages"][2]["content"] = "the card on file is 4111 1111 1111 1111"
    masked = check_input(baseline(), turn, "chat")
    assert masked.refusal is None
    assert masked.body["messages"][2]["content"] == "the card on file is [CARD_1]"

    assert refused_rule(_agent_turn(TOKEN)) == "secrets:github"

