"""A whole answer as the chunk events an engine would have streamed it in, for a kept answer given again.

The answer cache keeps the engine's whole JSON; a client that asks for a
stream gets these events (and the Messages and Responses shapes feed them to
their stream translators), so a replayed stream is what a live one would be.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from llmgw.router.wire import JSON


def sse_data(chunks: Iterable[JSON]) -> bytes:
    """Chunk events as OpenAI streams them: `data: JSON` each, then `data: [DONE]`."""
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def chat_chunks(answer: JSON, include_usage: bool) -> list[JSON]:
    """A chat.completion as the chat.completion.chunk events an engine would have streamed.

    Each choice's thinking, text and tool calls in one delta each, then its
    finish; the usage last, in a chunk with no choices, as vLLM sends it.
    """
    head = {"id": answer.get("id") or "", "object": "chat.completion.chunk",
            "created": answer.get("created") or 0, "model": answer.get("model") or ""}
    if answer.get("system_fingerprint") is not None:
        head["system_fingerprint"] = answer["system_fingerprint"]
    chunks: list[JSON] = []

    def add(index: int, delta: JSON, finish: str | None = None) -> None:
        chunks.append({**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]})

    for choice in answer.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        role: JSON = {"role": message.get("role") or "assistant"}
        for name in ("reasoning_content", "reasoning"):
            if isinstance(message.get(name), str) and message[name]:
                add(index, {**role, name: message[name]})
                role = {}
                break
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content:
            add(index, {**role, "content": content})
            role = {}
        for n, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
            piece = {"index": n, "id": call.get("id"), "type": call.get("type") or "function",
                     "function": {"name": function.get("name") or "", "arguments": function.get("arguments") or ""}}
            add(index, {**role, **({"content": None} if role else {}), "tool_calls": [piece]})
            role = {}
        if role:  # an empty answer still says who is speaking
            add(index, {**role, "content": ""})
        add(index, {}, choice.get("finish_reason") or "stop")
    if include_usage and isinstance(answer.get("usage"), dict):
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks


def completion_chunks(answer: JSON, include_usage: bool) -> list[JSON]:
    """A text_completion as the events a streamed one is: each choice's text, then its finish."""
    head = {"id": answer.get("id") or "", "object": "text_completion",
            "created": answer.get("created") or 0, "model": answer.get("model") or ""}
    choices = [c for c in answer.get("choices") or [] if isinstance(c, dict)]
    chunks = [{**head, "choices": [{"index": c.get("index", 0), "text": c.get("text") or "", "logprobs": None,
                                    "finish_reason": None}]} for c in choices if c.get("text")]
    chunks += [{**head, "choices": [{"index": c.get("index", 0), "text": "", "logprobs": None,
                                     "finish_reason": c.get("finish_reason") or "stop"}]} for c in choices]
    if include_usage and isinstance(answer.get("usage"), dict):
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return chunks
