"""Chat completions as the engines send them, for the translation tests.

The shapes are vLLM's (0.9-0.11): a first chunk with the role and empty
content, reasoning in `reasoning_content`, a tool call's id and name in its
first delta and its arguments in pieces after, a finish chunk with an empty
delta, and, asked for with include_usage, a last chunk with no choices and
the usage.
"""

from __future__ import annotations

CHAT_ID = "chatcmpl-5f1c2a9b7e"
CREATED = 1760000000


def chunk(delta: dict | None = None, finish: str | None = None, *, stop_reason=None,
          usage: dict | None = None, choices: bool = True) -> dict:
    out = {"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": "qwen3-8b",
           "choices": [], "usage": usage}
    if choices:
        out["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish,
                           "stop_reason": stop_reason}]
    return out


def usage(prompt: int, completion: int, cached: int | None = None, reasoning: int | None = None) -> dict:
    out: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def stream(*, reasoning: list[str] = (), content: list[str] = (), tools: list[tuple[str, str, list[str]]] = (),
           finish: str = "stop", stop_reason=None, prompt: int = 21, completion: int | None = None,
           cached: int | None = None, with_usage: bool = True) -> list[dict]:
    """A whole streamed answer: thinking pieces, then text pieces, then tool calls."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in reasoning]
    chunks += [chunk({"content": piece}) for piece in content]
    for index, (call_id, name, pieces) in enumerate(tools):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
    chunks.append(chunk({}, finish, stop_reason=stop_reason))
    if with_usage:
        if completion is None:
            completion = len(reasoning) + len(content) + sum(len(p) for _, _, p in tools)
        chunks.append(chunk(usage=usage(prompt, completion, cached), choices=False))
    return chunks


def completion(*, content: str | None = "", reasoning: str | None = None, tool_calls: list[dict] | None = None,
               finish: str = "stop", stop_reason=None, prompt: int = 21, completion_tokens: int = 9,
               cached: int | None = None, reasoning_tokens: int | None = None) -> dict:
    """A non-streamed chat.completion."""
    message: dict = {"role": "assistant", "content": content, "tool_calls": tool_calls or []}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"id": CHAT_ID, "object": "chat.completion", "created": CREATED, "model": "qwen3-8b",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish,
                         "stop_reason": stop_reason}],
            "usage": usage(prompt, completion_tokens, cached, reasoning_tokens)}


def call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def run(translator, chunks: list[dict]) -> list[tuple[str, dict]]:
    events = []
    for c in chunks:
        events += translator.feed(c)
    return events + translator.finish()
