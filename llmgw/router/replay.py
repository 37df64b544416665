"""A kept answer given again: in the client's API shape, streamed or not, whichever way it was first asked.

The answer cache (llmgw.router.cache) holds the engine's JSON; these turn
it into the body or the Server-Sent Events a fresh answer in the asked
shape would have been, through the same translators a live stream goes
through, so a replayed answer cannot drift from a fresh one.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.router.cache import Entry
from llmgw.router.translate import anthropic as anth
from llmgw.router.translate import responses as resp_api
from llmgw.router.translate.common import encode_sse


def replay_json(entry: Entry, api: str, *, model: str = "", request: dict | None = None) -> bytes:
    """The answer as an unstreamed response body in `api`'s shape.

    `model` is the name the client asked for and `request` the client's own
    body: the messages and responses shapes echo them (thinking shown or
    not, the Responses settings) as a fresh answer would.
    """
    _same_api(entry, api)
    if api in ("chat", "completions", "embeddings"):
        return entry.answer  # the bytes the first client got: no second encoding
    answer = orjson.loads(entry.answer)
    if api == "messages":
        return orjson.dumps(anth.chat_to_message(answer, model=model or answer.get("model") or "",
                                                 include_thinking=anth.wants_thinking(request or {})))
    return orjson.dumps(resp_api.chat_to_response(answer, model=model or answer.get("model") or "",
                                                  request=request or {}))


def replay_stream(entry: Entry, api: str, *, model: str = "", request: dict | None = None,
                  include_usage: bool = False) -> bytes:
    """The whole answer as one write of Server-Sent Events in `api`'s shape, ending as a stream ends.

    Chat and completions get the engine's chunk events and `data: [DONE]`
    (the usage event only with `include_usage`, as stream_options asked);
    messages and responses get their own events, rendered by the same
    translators a live stream goes through.
    """
    _same_api(entry, api)
    if api == "embeddings":
        raise ValueError("embeddings are never streamed")
    answer = orjson.loads(entry.answer)
    if api == "completions":
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in completion_chunks(answer, include_usage)) \
            + b"data: [DONE]\n\n"
    chunks = chat_chunks(answer, include_usage or api != "chat")
    if api == "chat":
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    name = model or answer.get("model") or ""
    if api == "messages":
        translator: Any = anth.MessagesStream(model=name, include_thinking=anth.wants_thinking(request or {}))
    else:
        translator = resp_api.ResponsesStream(model=name, request=request or {})
    events: list = []
    for chunk in chunks:
        events.extend(translator.feed(chunk))
    events.extend(translator.finish())
    return encode_sse(events)


def _same_api(entry: Entry, api: str) -> None:
    if entry.api != api:
        # The API shape is part of the key, so only a caller's mistake gets here.
        raise ValueError(f"this answer was kept for the {entry.api} API, not {api}")


def chat_chunks(answer: dict, include_usage: bool) -> list[dict]:
    """A chat.completion as the chat.completion.chunk events an engine would have streamed.

    Each choice's thinking, text and tool calls in one delta each, then its
    finish; the usage last, in a chunk with no choices, as vLLM sends it.
    """
    head = {"id": answer.get("id") or "", "object": "chat.completion.chunk",
            "created": answer.get("created") or 0, "model": answer.get("model") or ""}
    if answer.get("system_fingerprint") is not None:
        head["system_fingerprint"] = answer["system_fingerprint"]
    chunks: list[dict] = []

    def add(index: int, delta: dict, finish: str | None = None) -> None:
        chunks.append({**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]})

    for choice in answer.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        role: dict = {"role": message.get("role") or "assistant"}
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


def completion_chunks(answer: dict, include_usage: bool) -> list[dict]:
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
