"""The answer side of /v1/responses: an engine's chat completion as a `response`.

`chat_to_response` for a whole answer, `ResponsesStream` for a streamed one.
Imported through llmgw.router.translate.responses, which is the module to use.
"""

from __future__ import annotations

import time
from typing import Any

from llmgw.router.translate.common import (
    Event,
    ToolCallAccumulator,
    chat_usage,
    first_choice,
    id_suffix,
    is_number,
    new_id,
    object_at,
    reasoning_text,
)
from llmgw.router.translate.responses_tools import namespaced_names
from llmgw.router.wire import JSON

# -- the answer ---------------------------------------------------------------


def chat_to_response(chat: JSON, *, model: str, request: JSON) -> JSON:
    """An engine's chat.completion as a Responses `response` object.

    `request` is the client's Responses request: the response echoes its
    settings (tools, tool_choice, instructions, ...) as OpenAI's does, and the
    SDKs require several of them.
    """
    suffix = id_suffix(chat.get("id"))
    choice = first_choice(chat) or {}
    message = object_at(choice, "message")
    finish = choice.get("finish_reason")
    status, incomplete = _status(finish)
    output: list[JSON] = []
    thinking = reasoning_text(message)
    if thinking:
        output.append(_reasoning_item(f"rs_{suffix}", thinking, "completed"))
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if isinstance(text, str) and text:
        output.append(_message_item(f"msg_{suffix}", text, "incomplete" if status == "incomplete" else "completed"))
    names = namespaced_names(request)
    for n, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = object_at(call, "function")
        arguments = function.get("arguments")
        output.append(_function_item(f"fc_{suffix}_{n}", _call_id(call.get("id")), function.get("name") or "",
                                     arguments if isinstance(arguments, str) else "", "completed", names))
    response = _response(f"resp_{suffix}", model, request, status, output, created_at=chat.get("created"))
    response["incomplete_details"] = incomplete
    response["usage"] = _usage(chat_usage(chat.get("usage")))
    return response


def _status(finish: Any) -> tuple[str, JSON | None]:
    if finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _response(response_id: str, model: str, request: JSON, status: str, output: list[JSON], *,
              created_at: Any = None) -> JSON:
    request = request if isinstance(request, dict) else {}
    reasoning = object_at(request, "reasoning")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at if is_number(created_at) else int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions") if isinstance(request.get("instructions"), str) else None,
        "max_output_tokens": request.get("max_output_tokens"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "temperature": request.get("temperature"),
        "text": request.get("text") if isinstance(request.get("text"), dict) else {"format": {"type": "text"}},
        "tool_choice": _echo_tool_choice(request.get("tool_choice")),
        "tools": [_echo_tool(t) for t in request.get("tools") or [] if isinstance(t, dict)],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "metadata": request.get("metadata") if isinstance(request.get("metadata"), dict) else {},
        "user": None,
        "usage": None,
    }


def _echo_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required") or isinstance(choice, dict):
        return choice
    return "auto"


def _echo_tool(tool: JSON) -> JSON:
    if tool.get("type") not in (None, "function"):
        return tool  # a namespace, or a tool the engine never saw: as the client sent it
    return {"type": "function", "name": tool.get("name"), "description": tool.get("description"),
            "parameters": tool.get("parameters"), "strict": tool.get("strict")}


def _usage(counts: JSON) -> JSON:
    return {
        "input_tokens": counts["prompt"],
        "input_tokens_details": {"cached_tokens": counts["cached"], "cache_write_tokens": 0},
        "output_tokens": counts["completion"],
        "output_tokens_details": {"reasoning_tokens": counts["reasoning"]},
        "total_tokens": counts["prompt"] + counts["completion"],
    }


def _reasoning_item(item_id: str, text: str | None, status: str) -> JSON:
    # The engines' reasoning is the model's raw thinking, not a summary, so it
    # goes in `content` as reasoning_text, as vLLM's own /v1/responses does;
    # Codex shows it with show_raw_agent_reasoning.
    content = [{"type": "reasoning_text", "text": text}] if text is not None else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def _message_item(item_id: str, text: str | None, status: str) -> JSON:
    content = [_output_text(text)] if text is not None else []
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _output_text(text: str) -> JSON:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _function_item(item_id: str, call_id: str, name: str, arguments: str, status: str,
                   names: dict[str, tuple[str, str]]) -> JSON:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}
    if name in names:
        # A namespace's function, under its namespace again (responses_tools.namespaced_names).
        item["namespace"], item["name"] = names[name]
    return item


def _call_id(call_id: Any) -> str:
    return call_id if isinstance(call_id, str) and call_id else f"call_{new_id()}"


# -- the streamed answer ------------------------------------------------------


class ResponsesStream:
    """Turns the engine's chat.completion.chunk events into Responses events.

    Feed it each chunk (`feed`), then `finish()` at the engine's [DONE], or
    `error(message)` when the stream was cut. Each returns (event type, data)
    pairs for `encode_sse`, numbered by `sequence_number` from 0.

    Output items follow one another: reasoning, the message, then each
    function call, each done before the next is added. The OpenAI SDK's
    stream accumulator checks every item's identity from added to done and
    against response.completed, so ids are fixed when an item is added.
    """

    def __init__(self, *, model: str, request: JSON, input_tokens: int = 0) -> None:
        self.model = model
        self.request = request if isinstance(request, dict) else {}
        self.input_tokens = input_tokens
        self._seq = 0
        self._started = False
        self._done = False
        self._suffix = ""
        self._created_at: Any = None
        self._items: list[JSON] = []  # every item added, its state filled in as it streams
        self._open: JSON | None = None
        self._tools = ToolCallAccumulator()
        self._names = namespaced_names(self.request)
        self._tool_items: dict[int, JSON] = {}
        self._finish: str | None = None
        self._usage: JSON | None = None
        self._pieces = 0

    def feed(self, chunk: JSON) -> list[Event]:
        if self._done or not isinstance(chunk, dict):
            return []
        if chunk.get("error") or chunk.get("object") == "error":
            error = chunk.get("error")
            detail = error.get("message") if isinstance(error, dict) else chunk.get("message")
            return self.error(f"the model's engine failed: {detail}" if isinstance(detail, str)
                              else "the model's engine failed while answering")
        events = self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choice = first_choice(chunk)
        if choice is None:
            return events
        delta = object_at(choice, "delta")
        thinking = reasoning_text(delta)
        if thinking:
            item = self._ensure(events, "reasoning")
            item["text"] += thinking
            self._emit(events, "response.reasoning_text.delta", item_id=item["id"], output_index=item["index"],
                       content_index=0, delta=thinking)
            self._pieces += 1
        text = delta.get("content")
        if isinstance(text, str) and text:
            item = self._ensure(events, "message")
            item["text"] += text
            self._emit(events, "response.output_text.delta", item_id=item["id"], output_index=item["index"],
                       content_index=0, delta=text, logprobs=[])
            self._pieces += 1
        for piece in delta.get("tool_calls") or []:
            if isinstance(piece, dict):
                self._tool_piece(events, piece)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
        return events

    def finish(self) -> list[Event]:
        if self._done:
            return []
        events = self._start({})
        self._close(events)
        self._done = True
        status, incomplete = _status(self._finish)
        response = self._response(status)
        response["incomplete_details"] = incomplete
        if self._usage is not None:
            response["usage"] = _usage(chat_usage(self._usage))
        else:
            # No usage from the engine: one token a piece, as vLLM and
            # llama.cpp send them.
            response["usage"] = _usage({"prompt": self.input_tokens, "completion": self._pieces, "cached": 0,
                                        "reasoning": 0})
        # A response cut short by max_output_tokens ends with
        # response.incomplete, as OpenAI's does; Codex then reports it rather
        # than acting on half an answer.
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        self._emit(events, kind, response=response)
        return events

    def error(self, message: str, *, code: str = "server_error") -> list[Event]:
        """The stream was cut: response.failed, carrying what was sent so far.

        Codex reads response.error.message from it and retries the turn.
        """
        if self._done:
            return []
        events = self._start({})
        self._done = True
        if self._open is not None:
            self._open["status"] = "incomplete"
        response = self._response("failed")
        response["error"] = {"code": code, "message": message}
        self._emit(events, "response.failed", response=response)
        return events

    def _emit(self, events: list[Event], kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": self._seq, **fields}))
        self._seq += 1

    def _start(self, chunk: JSON) -> list[Event]:
        if self._started:
            return []
        self._started = True
        self._suffix = id_suffix(chunk.get("id"))
        self._created_at = chunk.get("created")
        events: list[Event] = []
        self._emit(events, "response.created", response=self._response("in_progress"))
        self._emit(events, "response.in_progress", response=self._response("in_progress"))
        return events

    def _response(self, status: str) -> JSON:
        output = [self._item(item) for item in self._items] if status != "in_progress" else []
        return _response(f"resp_{self._suffix}", self.model, self.request, status, output,
                         created_at=self._created_at)

    def _item(self, item: JSON) -> JSON:
        if item["kind"] == "reasoning":
            return _reasoning_item(item["id"], item["text"], item["status"])
        if item["kind"] == "message":
            return _message_item(item["id"], item["text"], item["status"])
        return _function_item(item["id"], item["call_id"], item["name"], item["arguments"], item["status"],
                              self._names)

    def _ensure(self, events: list[Event], kind: str) -> JSON:
        if self._open is not None and self._open["kind"] == kind:
            return self._open
        self._close(events)
        prefix = "rs" if kind == "reasoning" else "msg"
        # A second message or reasoning item (text after a tool call) needs an id of its own.
        count = sum(1 for i in self._items if i["kind"] == kind)
        item_id = f"{prefix}_{self._suffix}" + (f"_{count}" if count else "")
        item = self._add(events, {"kind": kind, "id": item_id, "text": ""})
        part = {"type": "reasoning_text", "text": ""} if kind == "reasoning" else _output_text("")
        self._emit(events, "response.content_part.added", item_id=item_id, output_index=item["index"],
                   content_index=0, part=part)
        return item

    def _add(self, events: list[Event], item: JSON) -> JSON:
        item.update(index=len(self._items), status="in_progress")
        self._items.append(item)
        self._open = item
        added = self._item(item)
        if item["kind"] != "function_call":
            added = {**added, "content": []}
        self._emit(events, "response.output_item.added", output_index=item["index"], item=added)
        return item

    def _close(self, events: list[Event]) -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        item["status"] = "completed"
        common = {"item_id": item["id"], "output_index": item["index"]}
        if item["kind"] == "reasoning":
            self._emit(events, "response.reasoning_text.done", **common, content_index=0, text=item["text"])
            self._emit(events, "response.content_part.done", **common, content_index=0,
                       part={"type": "reasoning_text", "text": item["text"]})
        elif item["kind"] == "message":
            self._emit(events, "response.output_text.done", **common, content_index=0, text=item["text"],
                       logprobs=[])
            self._emit(events, "response.content_part.done", **common, content_index=0,
                       part=_output_text(item["text"]))
        else:
            self._emit(events, "response.function_call_arguments.done", **common, arguments=item["arguments"])
        self._emit(events, "response.output_item.done", output_index=item["index"], item=self._item(item))

    def _tool_piece(self, events: list[Event], piece: JSON) -> None:
        call, arguments = self._tools.add(piece)
        tool = call.index
        item = self._tool_items.get(tool)
        if item is None:
            if call.name is None:
                return  # the name comes later; its arguments wait in the accumulator
            self._close(events)
            item = self._add(events, {"kind": "function_call", "id": f"fc_{self._suffix}_{len(self._tool_items)}",
                                      "call_id": _call_id(call.id), "name": call.name, "arguments": ""})
            self._tool_items[tool] = item
            arguments = call.arguments
        elif item is not self._open:
            return  # a piece for a call already done; never seen from the engines
        if arguments:
            item["arguments"] += arguments
            self._emit(events, "response.function_call_arguments.delta", item_id=item["id"],
                       output_index=item["index"], delta=arguments)
            self._pieces += 1
