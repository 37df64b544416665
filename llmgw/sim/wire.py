"""The bytes the sim sends: OpenAI's JSON shapes, built from prebuilt pieces.

A streamed token is the request's chunk head (id, created, model) plus one
of sixteen prebuilt token tails, so a 64-token stream costs 64 byte
concatenations and no JSON encoding; the sim has to stay well above the
gateway it is measuring.
"""

from __future__ import annotations

import math
import struct

import orjson

from llmgw.sim import tokens
from llmgw.sim.embed import as_base64, vector
from llmgw.sim.plans import ChatPlan, CompletionPlan, EmbeddingPlan, SemanticPlan

DONE = b"data: [DONE]\n\n"
_OPEN = b',"logprobs":null,"finish_reason":null}]}\n\n'

# Delta tails for chat tokens: the first token carries the role too.
_CHAT_FIRST = tuple(b'{"role":"assistant","content":' + w + b"}" + _OPEN for w in tokens.WORDS_JSON)
_CHAT_NEXT = tuple(b'{"content":' + w + b"}" + _OPEN for w in tokens.WORDS_JSON)
_THINK_FIRST = tuple(b'{"role":"assistant","reasoning_content":' + w + b"}" + _OPEN for w in tokens.THOUGHTS_JSON)
_THINK_NEXT = tuple(b'{"reasoning_content":' + w + b"}" + _OPEN for w in tokens.THOUGHTS_JSON)
_TEXT = tuple(w + _OPEN for w in tokens.WORDS_JSON)


def usage(prompt: int, completion: int, cached: int | None = None) -> dict:
    """`cached`: what the prefix cache held (--tokenizer); without one, the fixed rule of tokens.cached_tokens."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": tokens.cached_tokens(prompt) if cached is None else cached}}


def _finish(reason: str) -> bytes:
    return b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]}\n\n'


def chat_events(rid: str, created: int, model_json: bytes, plan: ChatPlan) -> tuple[list[bytes], bytes]:
    """A chat stream as (one event a token, what follows the last token)."""
    head = (b'data: {"id":"' + rid.encode() + b'","object":"chat.completion.chunk","created":'
            + str(created).encode() + b',"model":' + model_json + b',"choices":[{"index":0,"delta":')
    events = [head + (_THINK_FIRST if i == 0 else _THINK_NEXT)[i % len(_THINK_NEXT)]
              for i in range(plan.reasoning)]
    first = not events
    if plan.tool_name is not None:
        call = {"index": 0, "id": "call_" + rid[-16:], "type": "function",
                "function": {"name": plan.tool_name, "arguments": ""}}
        opening: dict[str, object] = (
            {"role": "assistant", "content": None, "tool_calls": [call]} if first else {"tool_calls": [call]})
        events.append(head + orjson.dumps(opening) + _OPEN)
        for piece in plan.tool_pieces:
            delta: dict[str, object] = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            events.append(head + orjson.dumps(delta) + _OPEN)
    elif plan.echo is not None:
        for i, word in enumerate(plan.echo):
            delta = {"role": "assistant", "content": word} if i == 0 and first else {"content": word}
            events.append(head + orjson.dumps(delta) + _OPEN)
    elif plan.content:
        words = len(_CHAT_NEXT)
        events.append(head + (_CHAT_FIRST[0] if first else _CHAT_NEXT[0]))
        events.extend([head + _CHAT_NEXT[i % words] for i in range(1, plan.content)])
    trailer = head + b"{}" + _finish(plan.finish)
    if plan.include_usage:
        trailer += (b'data: {"id":"' + rid.encode() + b'","object":"chat.completion.chunk","created":'
                    + str(created).encode() + b',"model":' + model_json + b',"choices":[],"usage":'
                    + orjson.dumps(usage(plan.prompt_tokens, plan.completion_tokens, plan.cached)) + b"}\n\n")
    return events, trailer + DONE


def chat_body(rid: str, created: int, model: str, plan: ChatPlan) -> bytes:
    text = "".join(plan.echo) if plan.echo is not None else tokens.words_text(plan.content)
    message: dict = {"role": "assistant", "content": text if plan.content else None}
    if plan.reasoning:
        message["reasoning_content"] = tokens.thoughts_text(plan.reasoning)
    if plan.tool_name is not None:
        message["tool_calls"] = [{"id": "call_" + rid[-16:], "type": "function",
                                  "function": {"name": plan.tool_name, "arguments": plan.tool_arguments}}]
    return orjson.dumps({
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish}],
        "usage": usage(plan.prompt_tokens, plan.completion_tokens, plan.cached),
    })


def completion_events(rid: str, created: int, model_json: bytes, plan: CompletionPlan) -> tuple[list[bytes], bytes]:
    """A completions stream: one event a token step (a token for each prompt), then the ends."""
    base = (b'data: {"id":"' + rid.encode() + b'","object":"text_completion","created":'
            + str(created).encode() + b',"model":' + model_json + b',"choices":[{"index":')
    heads = [base + str(i).encode() + b',"text":' for i in range(len(plan.prompts))]
    words = len(_TEXT)
    events = [b"".join([h + _TEXT[i % words] for h in heads]) for i in range(plan.count)]
    trailer = b"".join(h + b'""' + _finish(plan.finish) for h in heads)
    if plan.include_usage:
        trailer += (b'data: {"id":"' + rid.encode() + b'","object":"text_completion","created":'
                    + str(created).encode() + b',"model":' + model_json + b',"choices":[],"usage":'
                    + orjson.dumps(usage(plan.prompt_tokens, plan.count * len(plan.prompts), plan.cached)) + b"}\n\n")
    return events, trailer + DONE


def completion_body(rid: str, created: int, model: str, plan: CompletionPlan) -> bytes:
    text = tokens.words_text(plan.count)
    return orjson.dumps({
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": plan.finish}
                    for i in range(len(plan.prompts))],
        "usage": usage(plan.prompt_tokens, plan.count * len(plan.prompts), plan.cached),
    })


def embedding_body(model: str, plan: EmbeddingPlan) -> bytes:
    data = []
    for i, key in enumerate(plan.keys):
        values = vector(key, plan.dimensions)
        data.append({"object": "embedding", "index": i,
                     "embedding": as_base64(values) if plan.base64 else values})
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": plan.prompt_tokens, "total_tokens": plan.prompt_tokens}})


def semantic_embedding_body(model: str, plan: SemanticPlan, vectors: list[list[float]]) -> bytes:
    """A real model's vectors; a shorter `dimensions` keeps the first values, made a unit vector again."""
    data = []
    for i, values in enumerate(vectors):
        if plan.dimensions < len(values):
            cut = values[:plan.dimensions]
            norm = math.sqrt(sum(x * x for x in cut)) or 1.0
            values = [x / norm for x in cut]
        # float32, so the JSON floats and the base64 bytes carry the same values.
        packed = struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))
        data.append({"object": "embedding", "index": i,
                     "embedding": as_base64(packed) if plan.base64 else packed})
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": plan.prompt_tokens, "total_tokens": plan.prompt_tokens}})


def models_body(model: str, created: int, context_length: int) -> bytes:
    return orjson.dumps({"object": "list", "data": [{
        "id": model, "object": "model", "created": created, "owned_by": "vllm", "root": model,
        "parent": None, "max_model_len": context_length,
    }]})


_TYPES = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
          403: ("permission_error", None), 404: ("invalid_request_error", None),
          429: ("requests", "rate_limit_exceeded")}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> bytes:
    kind, default_code = _TYPES.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param,
                                   "code": code or default_code}})
