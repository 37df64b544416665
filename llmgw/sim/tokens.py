"""The sim's deterministic language: which tokens it says, and how it counts a prompt.

Everything here is a pure function of the request, so a test (or a router's
accounting) can predict an answer's text and usage exactly without running
a model. The rules are in docs/sim-engine.md; change them there too.
"""

from __future__ import annotations

import re
from functools import lru_cache

import orjson

# Sixteen words, each one token with its leading space, cycled: token i of an
# answer is WORDS[i % 16]. The answer to max_tokens=3 is " the quick brown".
WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy",
         " dog", " while", " seven", " wizards", " quietly", " hum", " old", " songs")
# What a thinking answer reasons with first, cycled the same way.
THOUGHTS = (" let", " me", " think", " this", " through")
# A thinking answer spends at most this many of its tokens on reasoning, and
# at most half of them, so even a short answer keeps some content.
MAX_REASONING_TOKENS = 4
# Prompts longer than this report part of themselves as served from a
# prefix cache, so a router's cached-token accounting has something to count.
CACHE_FROM_TOKENS = 64
CACHE_BLOCK = 16

WORDS_JSON = tuple(orjson.dumps(w) for w in WORDS)
THOUGHTS_JSON = tuple(orjson.dumps(w) for w in THOUGHTS)


def estimate_tokens(chars: int) -> int:
    """About four characters a token, as tokenizers of English average; never 0."""
    return max(1, (chars + 3) // 4)


def cached_tokens(prompt_tokens: int) -> int:
    """Half a long prompt, rounded down to whole 16-token blocks as vLLM's cache keeps them."""
    if prompt_tokens <= CACHE_FROM_TOKENS:
        return 0
    return prompt_tokens // 2 // CACHE_BLOCK * CACHE_BLOCK


@lru_cache(maxsize=1024)
def words_text(count: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(count))


@lru_cache(maxsize=64)
def thoughts_text(count: int) -> str:
    return "".join(THOUGHTS[i % len(THOUGHTS)] for i in range(count))


def reasoning_split(count: int) -> int:
    """How many of a thinking answer's `count` tokens are reasoning."""
    return min(MAX_REASONING_TOKENS, count // 2)


def message_chars(messages: list) -> int:
    """Characters of text in a chat's messages: string contents and text parts."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    chars += len(part["text"])
    return chars


def message_text(content: object) -> str:
    """A message's text: its string content, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


_EXAMPLES = {"string": "x", "number": 1, "integer": 1, "boolean": True, "array": [], "object": {}, "null": None}


def tool_arguments(parameters: object) -> str:
    """The arguments a sim tool call passes: each required key with a plain example value.

    Strings are "x", numbers 1, booleans true, an enum its first value, so
    the call validates against the schema it was given in the usual cases.
    A schema is the client's JSON, whatever it holds: a `type` that is a
    list of lists or an object once reached the lookup below and answered
    500 (issue 10, item 12); anything that names no type gets "x".
    """
    if not isinstance(parameters, dict):
        return "{}"
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = parameters.get("required")
    required = required if isinstance(required, list) else []
    args = {key: _example(properties.get(key)) for key in required if isinstance(key, str)}
    return orjson.dumps(args).decode()


def _example(schema: object) -> object:
    if not isinstance(schema, dict):
        return "x"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        try:
            orjson.dumps(enum[0])  # a value nested past what orjson writes is no example
            return enum[0]
        except orjson.JSONEncodeError:
            return "x"
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first named type
        kind = next((k for k in kind if isinstance(k, str) and k != "null"), "null")
    return _EXAMPLES.get(kind, "x") if isinstance(kind, str) else "x"


def argument_pieces(arguments: str) -> list[str]:
    """A tool call's arguments as a stream sends them: 8-character pieces, at least two."""
    if len(arguments) <= 8:
        half = max(1, len(arguments) // 2)
        return [arguments[:half], arguments[half:]]
    return [arguments[i:i + 8] for i in range(0, len(arguments), 8)]


def echo_words(messages: list) -> tuple[str, ...]:
    """The last user message's words, each with the space before it: an echo's tokens."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = _part_text(content)
            if isinstance(content, str) and content.strip():
                return tuple(re.findall(r"\s*\S+", " " + content.lstrip()))
    return (" nothing",)


def _part_text(parts: list) -> str:
    """The text parts' text joined; a part whose text is not a string is skipped, not a 500."""
    return " ".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def guard_words(messages: list, words: dict[str, str]) -> tuple[str, ...]:
    """A guard model's judgment of the last message (the user's prompt, or the assistant's answer to it)
    in Qwen3Guard-Gen's words, as tokens: Unsafe, with a category for each of `words` it contains."""
    text = ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") in ("user", "assistant"):
            content = message.get("content")
            if isinstance(content, list):
                content = _part_text(content)
            text = content if isinstance(content, str) else ""
            break
    lowered = text.lower()
    found = list(dict.fromkeys(category for word, category in words.items() if word.lower() in lowered))
    judgment = f"Safety: Unsafe\nCategories: {', '.join(found)}" if found else "Safety: Safe\nCategories: None"
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        judgment += "\nRefusal: No"
    return tuple(re.findall(r"\s*\S+", judgment))
