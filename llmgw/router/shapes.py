"""The shape of an OpenAI request, checked before anything reads it: what does not fit is refused, not passed on.

Chat, completions and embeddings bodies go to the engine as the client
sent them, so anything this module lets by reaches the engine's parser and
chat template. vLLM reads an untyped `{"text": ...}` part as text, a chat
template may render a key the guardrails never read, and an engine that
chokes on a shape answers 500, which counts against its breaker. So a
body that is not what the endpoint's schema says is refused here with a
sentence naming the field, in OpenAI's words:
`messages[1].content[0].type must be one of "text", "image_url", …`.

What real SDKs send passes: image, audio and file parts, tool calls and
results, `refusal` parts, the deprecated `functions`, and the engines' own
extensions (`chat_template_kwargs`, `documents`, video and audio URLs).
Fields this module does not know are left to the engine: they are
parameters, not text the model reads. One is refused: `chat_template`,
which would let a request replace the model's own template.

Anthropic's /v1/messages and the Responses API are not checked here:
their translators (llmgw/router/translate/) build the engine's request
from the fields they know, refusing what they cannot translate, so
nothing of the client's body is passed on unread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, overload

from llmgw.router.translate.common import json_type
from llmgw.router.wire import JSON


class ShapeError(ValueError):
    """A body that does not fit its endpoint's schema: `message` says where and what, `param` is the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.message = message
        self.param = param


# The content part types each role may send (OpenAI's schema, and vLLM's
# video_url and audio_url for what a user sends).
_PARTS = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file", "video_url", "audio_url"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
    "function": ("text",),
}
# The field each part type carries, and what it must be.
_PART_FIELDS: dict[str, tuple[str, type]] = {
    "text": ("text", str),
    "refusal": ("refusal", str),
    "image_url": ("image_url", dict),
    "input_audio": ("input_audio", dict),
    "file": ("file", dict),
    "video_url": ("video_url", dict),
    "audio_url": ("audio_url", dict),
}
# The roles whose content may be left out or null: an assistant turn that
# only calls tools.
_CONTENT_OPTIONAL = ("assistant",)


def check(api: str, body: JSON) -> None:
    """Raise ShapeError when `body` does not fit the `api` endpoint's schema; chat, completions, embeddings."""
    checker = _CHECKS.get(api)
    if checker is not None:
        checker(body)


def _one_of(values: tuple[str, ...]) -> str:
    quoted = [f'"{v}"' for v in values]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} or {quoted[1]}"
    return "one of " + ", ".join(quoted)


def _got(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else json_type(value)


def _refuse(path: str, must: str, value: Any) -> ShapeError:
    return ShapeError(f"{path} must be {must}, got {_got(value)}", path)


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _string(obj: JSON, key: str, path: str, required: bool = False) -> None:
    value = obj.get(key)
    if value is None:
        if required:
            raise ShapeError(f"{_at(path, key)} is required", _at(path, key))
        return
    if not isinstance(value, str):
        raise _refuse(_at(path, key), "a string", value)


@overload
def _object(obj: JSON, key: str, path: str, required: Literal[True]) -> JSON: ...


@overload
def _object(obj: JSON, key: str, path: str, required: bool = False) -> JSON | None: ...


def _object(obj: JSON, key: str, path: str, required: bool = False) -> JSON | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise ShapeError(f"{_at(path, key)} is required", _at(path, key))
        return None
    if not isinstance(value, dict):
        raise _refuse(_at(path, key), "an object", value)
    return value


def _list(obj: JSON, key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _refuse(key, "an array", value)
    return value


# -- chat ----------------------------------------------------------------------


def _chat(body: JSON) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ShapeError('"messages" must be a non-empty list of messages', "messages")
    for i, message in enumerate(messages):
        _message(message, f"messages[{i}]")
    if "chat_template" in body:
        raise ShapeError("chat_template cannot be set by a request: the model's own chat template is used "
                         "(chat_template_kwargs may pass it arguments)", "chat_template")
    for i, tool in enumerate(_list(body, "tools")):
        _tool(tool, f"tools[{i}]")
    for i, function in enumerate(_list(body, "functions")):
        at = f"functions[{i}]"
        if not isinstance(function, dict):
            raise _refuse(at, "an object with a name", function)
        _function(function, at)
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, (str, dict)):
        raise _refuse("tool_choice", '"none", "auto", "required" or an object naming a tool', choice)
    for key in ("response_format", "chat_template_kwargs"):
        _object(body, key, "")
    for i, document in enumerate(_list(body, "documents")):
        if not isinstance(document, dict):
            raise _refuse(f"documents[{i}]", "an object", document)


def _message(message: Any, at: str) -> None:
    if not isinstance(message, dict):
        raise _refuse(at, "an object with a role and content", message)
    role = message.get("role")
    if not isinstance(role, str) or role not in _PARTS:
        raise _refuse(f"{at}.role", _one_of(tuple(_PARTS)), role)
    content = message.get("content")
    if content is None:
        if role not in _CONTENT_OPTIONAL:
            raise ShapeError(f"{at}.content is required: the {role} message's text, or an array of content parts",
                             f"{at}.content")
    elif isinstance(content, list):
        for j, part in enumerate(content):
            _part(part, f"{at}.content[{j}]", _PARTS[role])
    elif not isinstance(content, str):
        raise _refuse(f"{at}.content", "a string or an array of content parts", content)
    _string(message, "name", at)
    if role == "tool":
        _string(message, "tool_call_id", at, required=True)
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise ShapeError(f"{at}.tool_calls: only an assistant message makes tool calls", f"{at}.tool_calls")
        if not isinstance(calls, list):
            raise _refuse(f"{at}.tool_calls", "an array", calls)
        for k, call in enumerate(calls):
            _tool_call(call, f"{at}.tool_calls[{k}]")
    if message.get("function_call") is not None:
        call = _object(message, "function_call", at, required=True)
        _string(call, "name", f"{at}.function_call", required=True)
        _string(call, "arguments", f"{at}.function_call", required=True)


def _part(part: Any, at: str, kinds: tuple[str, ...]) -> None:
    if not isinstance(part, dict):
        raise _refuse(at, f"a content part object with a type ({_one_of(kinds)})", part)
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in kinds:
        raise _refuse(f"{at}.type", _one_of(kinds), kind)
    field, kind_of = _PART_FIELDS[kind]
    value = part.get(field)
    if not isinstance(value, kind_of):
        raise ShapeError(f"{at}.{field} must be {'a string' if kind_of is str else 'an object'} "
                         f"in a {kind} part, got {_got(value)}", f"{at}.{field}")
    if kind in ("image_url", "video_url", "audio_url") and isinstance(value, dict):  # an object, by _PART_FIELDS
        _string(value, "url", f"{at}.{field}", required=True)


def _tool_call(call: Any, at: str) -> None:
    if not isinstance(call, dict):
        raise _refuse(at, "an object with an id, a type and a function", call)
    _string(call, "id", at)
    kind = call.get("type", "function")
    if kind == "function":
        function = _object(call, "function", at, required=True)
        _string(function, "name", f"{at}.function", required=True)
        _string(function, "arguments", f"{at}.function", required=True)
    elif kind == "custom":
        custom = _object(call, "custom", at, required=True)
        _string(custom, "name", f"{at}.custom", required=True)
        _string(custom, "input", f"{at}.custom")
    else:
        raise _refuse(f"{at}.type", '"function" or "custom"', kind)


def _tool(tool: Any, at: str) -> None:
    if not isinstance(tool, dict):
        raise _refuse(at, 'an object like {"type": "function", "function": {"name": ...}}', tool)
    kind = tool.get("type")
    if kind == "function":
        _function(_object(tool, "function", at, required=True), f"{at}.function")
    elif kind == "custom":
        custom = _object(tool, "custom", at, required=True)
        _string(custom, "name", f"{at}.custom", required=True)
        _string(custom, "description", f"{at}.custom")
    else:
        raise _refuse(f"{at}.type", '"function" or "custom"', kind)


def _function(function: JSON, at: str) -> None:
    _string(function, "name", at, required=True)
    _string(function, "description", at)
    _object(function, "parameters", at)


# -- completions and embeddings -------------------------------------------------


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value)


def _prompt(value: Any, field: str, what: str) -> None:
    """Text, a list of texts, token ids, or a list of token-id lists: the four forms OpenAI takes."""
    if isinstance(value, str):
        return
    if isinstance(value, list) and value and (
            all(isinstance(v, str) for v in value) or _is_tokens(value) or all(_is_tokens(v) for v in value)):
        return
    raise _refuse(field, f"{what}: text, a non-empty array of texts, an array of token ids or an array of "
                         "such arrays", value)


def _completions(body: JSON) -> None:
    _prompt(body.get("prompt"), "prompt", "the prompt")
    _string(body, "suffix", "")


def _embeddings(body: JSON) -> None:
    if "messages" in body:
        raise ShapeError('/v1/embeddings takes "input", not "messages"', "messages")
    _prompt(body.get("input"), "input", "what to embed")


_CHECKS: dict[str, Callable[[JSON], None]] = {
    "chat": _chat,
    "completions": _completions,
    "embeddings": _embeddings,
}
