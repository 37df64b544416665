"""What the Anthropic and Responses translations share: the refusal, SSE, ids, usage, the tools list.

Nothing here does I/O. The engines behind the gateway (vLLM, llama.cpp,
SGLang) speak only OpenAI's Chat Completions, so every other client API is a
translation to and from that one shape.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.router.wire import JSON


class TranslateError(ValueError):
    """A request the gateway cannot translate, with a sentence saying why.

    `param` names the field at fault ("messages.2.content.0.type") so the
    caller can put it in the error object; the message already names it too,
    for clients that only show the message.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


# A server-sent event of the Messages and Responses APIs: its name and its data.
Event = tuple[str, JSON]


def encode_sse(events: Iterable[Event]) -> bytes:
    """Write events as Server-Sent Events, `event: NAME` then `data: JSON`.

    All of a batch goes out as one bytes object so the handler writes it in
    one call: a streamed answer is relayed as the engine sends it.
    """
    out = bytearray()
    for name, data in events:
        out += b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
    return bytes(out)


# The longest run of digits an id the gateway makes may hold. A card number
# is 13 to 19 digits (with "-" or spaces between them), a phone or an id
# number 10 or 11; an id holding such a run (a random part that happened to
# be digits, an engine's zero-padded counter) was read as a card by the
# baseline on the client's next turn, which sends the id back (issue 25,
# item 21). The guard no longer reads ids as cards, but an id of ours should
# not look like one wherever else it is shown.
MAX_DIGIT_RUN = 8
_DIGIT_RUN = re.compile(rf"\d(?:-?\d){{{MAX_DIGIT_RUN},}}")


def short_digit_runs(text: str) -> str:
    """`text` with an "x" after every MAX_DIGIT_RUN digits of a run (digits joined by "-" count as one run)."""
    def cut(m: re.Match[str]) -> str:
        out, digits = [], 0
        for c in m.group():
            if c.isdigit():
                if digits == MAX_DIGIT_RUN:
                    out.append("x")
                    digits = 0
                digits += 1
            out.append(c)
        return "".join(out)
    return _DIGIT_RUN.sub(cut, text)


def id_suffix(chat_id: Any) -> str:
    """The distinctive part of an engine's completion id, for ids of our own.

    vLLM answers "chatcmpl-<hex>", llama.cpp "chatcmpl-<random>"; keeping the
    suffix lets an operator find the engine's log line from the client's id.
    A long run of digits in it is cut (short_digit_runs): the engine's id
    is still recognisable, and ours holds nothing that reads as a number.
    """
    if isinstance(chat_id, str) and chat_id:
        for prefix in ("chatcmpl-", "cmpl-"):
            if chat_id.startswith(prefix):
                chat_id = chat_id[len(prefix):]
                break
        cleaned = "".join(c for c in chat_id if c.isalnum() or c in "-_")
        if cleaned:
            return short_digit_runs(cleaned)
    return new_id()


def new_id() -> str:
    """A random id of our own (32 hex digits), with no long run of digits."""
    return short_digit_runs(uuid.uuid4().hex)


def chat_usage(usage: Any) -> JSON:
    """The counts an engine reported, with zeros for what it left out.

    Returns prompt, completion, cached (prompt tokens read from the prefix
    cache) and reasoning (completion tokens spent thinking).
    """
    if not isinstance(usage, dict):
        usage = {}
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "prompt": _int(usage.get("prompt_tokens")),
        "completion": _int(usage.get("completion_tokens")),
        "cached": _int(prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else 0),
        "reasoning": _int(completion_details.get("reasoning_tokens")
                          if isinstance(completion_details, dict) else 0),
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def reasoning_text(message_or_delta: JSON) -> str:
    """The model's thinking in an engine's message or delta.

    SGLang and llama.cpp call it `reasoning_content`; vLLM moved to
    `reasoning` (0.10) and sent both for a while, so take one, never both.
    """
    text = message_or_delta.get("reasoning_content")
    if not isinstance(text, str) or not text:
        text = message_or_delta.get("reasoning")
    return text if isinstance(text, str) else ""


def first_choice(chunk: JSON) -> JSON | None:
    """Choice 0 of a chat completion or chunk; the gateway never asks for n > 1."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def object_at(parent: JSON, key: str) -> JSON:
    """`parent[key]` when it is an object, else {}: an engine may leave a part out, or send null."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def matched_stop_string(choice: JSON) -> str | None:
    """The stop string that ended the answer, when the engine says which.

    vLLM puts it in the choice's `stop_reason` (a string for a stop string,
    an int for a stop token id, null for end of sequence).
    """
    value = choice.get("stop_reason")
    return value if isinstance(value, str) and value else None


def image_part(url: str, detail: str | None = None) -> JSON:
    part: JSON = {"type": "image_url", "image_url": {"url": url}}
    if detail:
        part["image_url"]["detail"] = detail
    return part


def join_text(pieces: list[str]) -> str:
    # vLLM joins a message's text parts with "\n" when its chat template
    # wants a string; doing the same here keeps both paths' prompts equal.
    return "\n".join(pieces)


def json_type(value: Any) -> str:
    """What a JSON value is, in the words an error message uses."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def checked_tools(body: JSON, *, types: tuple[str | None, ...], other_type: str) -> list[tuple[str, JSON]]:
    """A request's `tools`, each with its place ("tools.2"), once the list is sound for this translation.

    Sound: an array of objects, each of one of `types` and with a name.
    `other_type` is the sentence for a tool of any other type, with `{kind}`
    where that type goes. What a tool's schema is called, and what else it
    may carry, differs between the APIs and is read by each translation.
    """
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslateError(f"tools must be an array, got {json_type(tools)}", "tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools.{i}"
        if not isinstance(tool, dict):
            raise TranslateError(f"{at} must be an object, got {json_type(tool)}", at)
        kind = tool.get("type")
        if kind not in types:
            raise TranslateError(f"{at}: " + other_type.format(kind=repr(kind)), f"{at}.type")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise TranslateError(f"{at} needs a name", f"{at}.name")
        out.append((at, tool))
    return out


@dataclass(slots=True)
class ToolCall:
    """One streamed tool call as collected so far: its id and name once sent, its arguments' text so far."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class ToolCallAccumulator:
    """Collects a streamed answer's tool calls, piece by piece, by index.

    vLLM sends a call's id and name in its first delta and the arguments in
    later ones; llama.cpp may send the whole call in one; some engines repeat
    the id in every delta. Only `index` is dependable.
    """

    def __init__(self) -> None:
        self.calls: dict[int, ToolCall] = {}

    def add(self, delta_call: JSON) -> tuple[ToolCall, str]:
        """Take one delta; returns the call so far and this delta's argument piece."""
        index = delta_call.get("index")
        if not isinstance(index, int):
            index = len(self.calls)
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = ToolCall(index)
        given_id = delta_call.get("id")
        if isinstance(given_id, str) and given_id and call.id is None:
            call.id = given_id
        function = delta_call.get("function") or {}
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name and call.name is None:
            call.name = name
        piece = function.get("arguments") if isinstance(function, dict) else None
        piece = piece if isinstance(piece, str) else ""
        call.arguments += piece
        return call, piece
