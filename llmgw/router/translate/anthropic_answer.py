"""The answer side of /v1/messages: an engine's chat completion as Anthropic's.

`chat_to_message` for a whole answer, `MessagesStream` for a streamed one,
`anthropic_error` for refusals. Imported through
llmgw.router.translate.anthropic, which is the module to use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.router.translate.common import (
    Event,
    ToolCallAccumulator,
    chat_usage,
    first_choice,
    id_suffix,
    matched_stop_string,
    new_id,
    object_at,
    reasoning_text,
)
from llmgw.router.wire import JSON

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# Anthropic's content blocks the engines have no counterpart for; named in
# the refusal so a person knows it is this block, not the request, at fault.
_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def anthropic_error(status: int, message: str) -> JSON:
    """The body of a refusal in Anthropic's shape, its type chosen by status."""
    kind = _ERROR_TYPES.get(status)
    if kind is None:
        kind = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- the answer ---------------------------------------------------------------


def chat_to_message(chat: JSON, *, model: str, include_thinking: bool = True) -> JSON:
    """An engine's chat.completion as Anthropic's `message`.

    `model` is the name the client asked for, echoed back. A tool call whose
    arguments are not a JSON object comes back with input {}: the tool then
    refuses it and the model, reading why, tries again, where a guessed
    object could run a tool with arguments nobody wrote.
    """
    choice = first_choice(chat) or {}
    message = object_at(choice, "message")
    content: list[JSON] = []
    thinking = reasoning_text(message)
    if thinking and include_thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    text = message.get("content")
    if isinstance(text, list):  # a few engines answer in parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = object_at(call, "function")
        content.append({"type": "tool_use", "id": _tool_use_id(call.get("id")),
                        "name": function.get("name") or "", "input": _arguments(function.get("arguments"))})

    stop_reason, stop_sequence = _stop(choice, any(b["type"] == "tool_use" for b in content))
    counts = chat_usage(chat.get("usage"))
    return {
        "id": f"msg_{id_suffix(chat.get('id'))}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(counts),
    }


def _usage(counts: JSON) -> JSON:
    # Anthropic counts cache reads apart from input_tokens (the total is
    # their sum), where chat completions counts them inside prompt_tokens.
    return {
        "input_tokens": max(counts["prompt"] - counts["cached"], 0),
        "output_tokens": counts["completion"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": counts["cached"],
    }


def _stop(choice: JSON, used_tools: bool) -> tuple[str, str | None]:
    finish = choice.get("finish_reason")
    if used_tools and finish in (None, "stop", "tool_calls", "function_call"):
        # llama.cpp has said "stop" after a tool call; the client must still
        # hear tool_use or it will not run the tool.
        return "tool_use", None
    stop_string = matched_stop_string(choice)
    if finish == "stop" and stop_string is not None:
        return "stop_sequence", stop_string
    # Only text is looked up: an engine's array or object there is not a key (unhashable) and ends the turn.
    return _STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn", None


def _tool_use_id(call_id: Any) -> str:
    return call_id if isinstance(call_id, str) and call_id else f"toolu_{new_id()}"


def _arguments(arguments: Any) -> JSON:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


# -- the streamed answer ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Block:
    """The content block a stream has open: what kind, its index in the message, the engine's tool index."""

    kind: str  # thinking, text or tool_use
    index: int
    tool: int | None


class MessagesStream:
    """Turns the engine's chat.completion.chunk events into Anthropic's stream.

    Feed it each chunk as it comes (`feed`), then `finish()` at the engine's
    [DONE], or `error(message)` when the stream was cut. Each returns the
    (event name, data) pairs to send, for `encode_sse`.

    Anthropic's blocks come one after another, never interleaved: a thinking
    block, then text, then each tool call, each closed before the next opens.
    The engines send a tool call's pieces in order too; a piece for a call
    already closed (never seen from vLLM, SGLang or llama.cpp) is dropped
    rather than sent after that block's stop.
    """

    def __init__(self, *, model: str, input_tokens: int = 0, include_thinking: bool = True) -> None:
        self.model = model
        self.input_tokens = input_tokens  # the caller's estimate until the engine's usage arrives
        self.include_thinking = include_thinking
        self._started = False
        self._done = False
        self._next_index = 0
        self._open: _Block | None = None
        self._tools = ToolCallAccumulator()
        self._tool_blocks: dict[int, int] = {}  # engine's tool index -> our block index
        self._used_tools = False
        self._finish: str | None = None
        self._stop_string: str | None = None
        self._usage: JSON | None = None
        self._pieces = 0

    def feed(self, chunk: JSON) -> list[Event]:
        if self._done or not isinstance(chunk, dict):
            return []
        if chunk.get("error") or chunk.get("object") == "error":
            return self.error(_engine_error_message(chunk))
        events = self._start(chunk.get("id"))
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choice = first_choice(chunk)
        if choice is None:
            return events
        delta = object_at(choice, "delta")

        thinking = reasoning_text(delta)
        if thinking and self.include_thinking:
            index = self._ensure(events, "thinking")
            events.append(_delta(index, {"type": "thinking_delta", "thinking": thinking}))
            self._pieces += 1
        text = delta.get("content")
        if isinstance(text, str) and text:
            index = self._ensure(events, "text")
            events.append(_delta(index, {"type": "text_delta", "text": text}))
            self._pieces += 1
        for piece in delta.get("tool_calls") or []:
            if isinstance(piece, dict):
                self._tool_piece(events, piece)

        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
            self._stop_string = matched_stop_string(choice)
        return events

    def finish(self) -> list[Event]:
        if self._done:
            return []
        events = self._start(None)
        self._close(events)
        self._done = True
        stop_reason, stop_sequence = _stop({"finish_reason": self._finish, "stop_reason": self._stop_string},
                                           self._used_tools)
        if self._usage is not None:
            usage = _usage(chat_usage(self._usage))
        else:
            # No usage from the engine: one token a piece is what vLLM and
            # llama.cpp send, so the count is close, and never zero for text.
            usage = {"input_tokens": self.input_tokens, "output_tokens": self._pieces}
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                         "usage": usage}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def error(self, message: str, *, status: int = 500) -> list[Event]:
        """The stream was cut: Anthropic's `error` event, after which nothing more is sent."""
        if self._done:
            return []
        self._done = True
        return [("error", anthropic_error(status, message))]

    def _start(self, chat_id: Any) -> list[Event]:
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {
            "id": f"msg_{id_suffix(chat_id)}", "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
        return [("message_start", {"type": "message_start", "message": message})]

    def _ensure(self, events: list[Event], kind: str) -> int:
        if self._open is not None and self._open.kind == kind:
            return self._open.index
        self._close(events)
        block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" \
            else {"type": "text", "text": ""}
        return self._open_block(events, kind, block, None)

    def _open_block(self, events: list[Event], kind: str, block: JSON, tool: int | None) -> int:
        index = self._next_index
        self._next_index += 1
        self._open = _Block(kind, index, tool)
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": block}))
        return index

    def _close(self, events: list[Event]) -> None:
        if self._open is None:
            return
        index = self._open.index
        if self._open.kind == "thinking":
            # Anthropic sends a thinking block's signature just before its
            # stop; clients wait for it. The engines sign nothing, so it is "".
            events.append(_delta(index, {"type": "signature_delta", "signature": ""}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        self._open = None

    def _tool_piece(self, events: list[Event], piece: JSON) -> None:
        call, arguments = self._tools.add(piece)
        tool = call.index
        if tool not in self._tool_blocks:
            if call.name is None:
                return  # the name comes later; its arguments wait in the accumulator
            self._close(events)
            self._used_tools = True
            block = {"type": "tool_use", "id": _tool_use_id(call.id), "name": call.name, "input": {}}
            self._tool_blocks[tool] = self._open_block(events, "tool_use", block, tool)
            arguments = call.arguments  # everything so far, including pieces that waited for the name
        elif self._open is None or self._open.tool != tool:
            return
        if arguments:
            events.append(_delta(self._tool_blocks[tool], {"type": "input_json_delta", "partial_json": arguments}))
            self._pieces += 1


def _delta(index: int, delta: JSON) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _engine_error_message(chunk: JSON) -> str:
    error = chunk.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return f"the model's engine failed: {error['message']}"
    if isinstance(chunk.get("message"), str):
        return f"the model's engine failed: {chunk['message']}"
    return "the model's engine failed while answering"
