"""What the model reads of a request: every string the engine will put in its prompt, found where it is.

The input rules are only as good as this list. A gateway that reads only
`messages[].content` lets a secret past in a tool's description, a
message's `name`, a schema's property or a completions `suffix`: the
engine's chat template renders all of those into the prompt. So:

- a message's content parts that are text go together as one `Text`,
  joined the way the engine joins them (the gate reads the seams, so a
  value split across two parts is still found);
- every other string of a message is read: `name`, tool calls' names and
  arguments, ids, `reasoning_content`, and any key an engine's template
  might render;
- the definitions beside the messages (`tools`, `functions`,
  `tool_choice`, `response_format`, `chat_template_kwargs`, `documents`)
  are read whole, their keys included, since a schema's property names
  are in the prompt too;
- only what the model cannot read as text is left out: an image's,
  audio's or file's bytes and URL.

Names that must come back as they were (a tool's name, a schema's
property, an id) are marked `names`: the gate reads them but never writes
a placeholder into one. Ids are also marked `identifier`: only the rules
that find secrets read them (see CompiledRules.find).

Walks are iterative: a request nested a thousand deep costs a loop, not a
RecursionError.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Path = tuple[Any, ...]

# Content parts' strings that are the message's text, in the shapes the
# gate is given (OpenAI chat, Responses, Anthropic messages). Read whatever
# the part's `type` says: vLLM takes an untyped {"text": ...} part as text.
_TEXT_KEYS = ("text", "refusal")
# A part's media: bytes or an address, never text the model reads.
_MEDIA_KEYS = frozenset(("image_url", "input_audio", "file", "video_url", "audio_url", "source", "data",
                         "signature", "cache_control"))
# Definitions beside the messages that a chat template renders (or the
# engine reads) as text.
_DEFINITIONS = ("tools", "functions", "tool_choice", "response_format", "chat_template_kwargs", "documents")
# Keys whose string is an identifier: made by an engine or a gateway to pair
# a tool call with its result, never typed by a person.
_ID_KEYS = frozenset(("id", "call_id", "tool_call_id", "tool_use_id"))
# Keys whose string is a name the answer must use unchanged.
_NAME_KEYS = frozenset(("name",)) | _ID_KEYS


@dataclass(slots=True)
class Text:
    """Strings the model reads as one text: a message's text parts, or one string on its own."""

    pieces: list[tuple[Path, str]]
    role: str
    """The role of the message whose content this is: user, system, assistant, tool; "" for any other
    string (a message's name, a tool call, a definition), which is never the user's turn."""

    names: bool = False
    """A name (tool, property, id): read, but a placeholder may not be written into it."""

    identifier: bool = False
    """An id pairing a tool call with its result (`id`, `call_id`, `tool_call_id`, `tool_use_id`): read by
    the rules that find secrets only (CompiledRules.find), as its digits are a counter's, not a card's."""


def texts(body: dict[str, Any], api: str) -> Iterator[Text]:
    """Every text in `body` that the model will read, in the order the engine reads them.

    `api` is the body's shape: "chat" (and the Anthropic and Responses
    requests once translated to it), "messages" and "responses" as the
    client sent them, "completions", "embeddings".
    """
    if api == "completions":
        yield from _prompts(body.get("prompt"), "prompt")
        if isinstance(body.get("suffix"), str):
            yield Text([(("suffix",), body["suffix"])], "")
        return
    if api == "embeddings":
        yield from _prompts(body.get("input"), "input")
        return
    if api == "workflows":
        # A run's typed values; its files (under "files") are bytes no rule reads.
        inputs = body.get("inputs")
        if isinstance(inputs, dict):
            for key, value in inputs.items():
                if isinstance(value, str):
                    yield Text([(("inputs", key), value)], "user")
        return
    if api == "images":
        # What to picture is the user's; a negative prompt the model reads as much.
        for key in ("prompt", "negative_prompt"):
            if isinstance(body.get(key), str):
                yield Text([((key,), body[key])], "user" if key == "prompt" else "")
        return
    for key in ("system", "instructions"):
        yield from _content(body.get(key), (key,), "system")
    if api == "responses" and "messages" not in body:
        items = body.get("input")
        if isinstance(items, str):
            yield Text([(("input",), items)], "user")
        elif isinstance(items, list):
            yield from _messages(items, "input")
    else:
        messages = body.get("messages")
        if isinstance(messages, list):
            yield from _messages(messages, "messages")
    for key in _DEFINITIONS:
        if key in body:
            yield from _walk(body[key], (key,), keys=True)


def unreadable(body: dict[str, Any], api: str) -> str | None:
    """The field holding a prompt the rules cannot read (token ids, embeddings), or None.

    Token ids are text to the engine but numbers to a pattern: this
    gateway holds no tokenizer to turn them back, so a policy that reads
    prompts has to refuse them rather than pass them unread.
    """
    if api == "completions":
        if body.get("prompt_embeds") is not None:
            return "prompt_embeds"
        field = "prompt"
    elif api == "embeddings":
        field = "input"
    else:
        return None
    value = body.get(field)
    if isinstance(value, list) and any(not isinstance(v, str) for v in value):
        return field
    return None


def _prompts(value: Any, field: str) -> Iterator[Text]:
    # Each prompt of a list is a generation (or an embedding) of its own.
    if isinstance(value, str):
        yield Text([((field,), value)], "user")
    elif isinstance(value, list):
        for i, p in enumerate(value):
            if isinstance(p, str):
                yield Text([((field, i), p)], "user")


def _messages(messages: list[Any], key: str) -> Iterator[Text]:
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        role = role if isinstance(role, str) and role else "user"
        at = (key, i)
        if "content" in m:
            yield from _content(m["content"], at + ("content",), role)
        if "output" in m:  # a Responses function_call_output: what the tool answered
            yield from _content(m["output"], at + ("output",), "tool")
        for name, value in m.items():
            if name in ("role", "content", "output", "encrypted_content"):
                continue
            # A message's own `name` is the speaker's, free text the answer
            # never repeats as a name: redacted like content. A function
            # call item's (Responses) is the function's.
            as_name = "" if name == "name" and "role" in m else name
            yield from _walk(value, at + (name,), keys=False, name=as_name)


def _content(content: Any, path: Path, role: str) -> Iterator[Text]:
    """A message's content: a string, or parts whose texts are read as one."""
    if isinstance(content, str):
        yield Text([(path, content)], role)
        return
    if not isinstance(content, list):
        if isinstance(content, dict):  # not a shape any API takes; read it all the same
            yield from _walk(content, path, keys=True)
        return
    joined: list[tuple[Path, str]] = []
    rest: list[Text] = []
    for j, part in enumerate(content):
        at = path + (j,)
        if isinstance(part, str):
            joined.append((at, part))
            continue
        if not isinstance(part, dict):
            continue
        for name, value in part.items():
            if name in _TEXT_KEYS and isinstance(value, str):
                joined.append((at + (name,), value))
            elif name == "content":
                # Anthropic's tool_result: what a tool answered is read as prompt.
                rest.extend(_content(value, at + (name,), "tool"))
            elif name not in _MEDIA_KEYS and name != "type":
                rest.extend(_walk(value, at + (name,), keys=True, name=name))
    if joined:
        yield Text(joined, role)
    yield from rest


def _walk(value: Any, path: Path, *, keys: bool, name: str = "") -> Iterator[Text]:
    """Every string under `value`, each a text of its own (never the user's turn); with `keys`, objects' keys too."""
    stack: list[tuple[Any, Path, str]] = [(value, path, name)]
    while stack:
        value, path, name = stack.pop()
        if isinstance(value, str):
            yield Text([(path, value)], "", names=name in _NAME_KEYS, identifier=name in _ID_KEYS)
        elif isinstance(value, dict):
            items = list(value.items())
            if keys:
                for k, _ in items:
                    yield Text([(path + (k,), k)], "", names=True)
            stack.extend((v, path + (k,), k) for k, v in reversed(items))
        elif isinstance(value, list):
            stack.extend((v, path + (i,), "") for i, v in reversed(list(enumerate(value))))
