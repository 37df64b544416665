"""A guardrail that reads the answer keeps its parts in the order the engine sent them."""

from __future__ import annotations

import json

import orjson

from llmgw.config.guard import Policy, Rules
from llmgw.guard.gate import OutputChecker
from llmgw.guard.policy import combine_policies
from llmgw.router.call import Call
from llmgw.router.guarded import ChunkGuard
from llmgw.router.relay import TranslatedStream
from llmgw.router.translate import anthropic as anth
from llmgw.router.translate import responses as resp_api
from llmgw.router.translate.common import encode_sse


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


# As the sim and vLLM send a thinking model's tool call: thinking with no sentence end, the call's name, its
# arguments in pieces.
ANSWER = [_chunk({"reasoning_content": " let me"}), _chunk({"reasoning_content": " think this"}),
          _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                  "function": {"name": "Read", "arguments": ""}}]}),
          _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"file_p'}}]}),
          _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ath":"x"}'}}]}),
          _chunk({}, "tool_calls")]


def _through_a_guardrail(translator) -> list[tuple[str, dict]]:
    call = Call(id="req_1", api="messages", principal=None, model=None, upstream_path="/chat/completions",
                upstream_body={"messages": [{"role": "user", "content": "Use the Read tool."}]}, stream=True,
                wants_usage=False, profile="", session_key=None, band=None)
    policy = combine_policies([("baseline", Policy(mode="enforce", output=Rules(secrets="block")))])
    stream = TranslatedStream(call, translator, encode_sse, guard=ChunkGuard(OutputChecker(policy, None)))
    sent = stream.transform(b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in ANSWER)) + stream.finish()
    return [(block.split(b"\n")[0][len(b"event: "):].decode(), json.loads(block.split(b"\ndata: ", 1)[1]))
            for block in sent.split(b"\n\n") if block]


def test_held_thinking_goes_out_before_a_tool_call_so_claude_code_gets_the_calls_input():
    events = _through_a_guardrail(anth.MessagesStream(model="qwen"))

    blocks = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert blocks == ["thinking", "tool_use"]
    tool_index = next(d["index"] for n, d in events if n == "content_block_start"
                      and d["content_block"]["type"] == "tool_use")
    pieces = [d["delta"]["partial_json"] for n, d in events
              if n == "content_block_delta" and d["index"] == tool_index]
    assert json.loads("".join(pieces)) == {"file_path": "x"}


def test_held_thinking_goes_out_before_a_tool_call_in_the_responses_api_too():
    events = _through_a_guardrail(resp_api.ResponsesStream(model="qwen", request={}))

    (done,) = [d["response"] for n, d in events if n == "response.completed"]
    assert [o["type"] for o in done["output"]] == ["reasoning", "function_call"]
    assert json.loads(done["output"][1]["arguments"]) == {"file_path": "x"}
