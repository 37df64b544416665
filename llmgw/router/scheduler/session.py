"""Which conversation a request belongs to, so its turns can go to one replica.

In order: the client's own `x-llmgw-session` header; else the request's
`user` (OpenAI) or `metadata.user_id` (Anthropic); else a hash of the
system prompt and the first user message. A chat client resends the whole
conversation every turn, so those two stay the same from the first turn to
the last — and they are the prefix the engine has cached. Two people with
the same system prompt but different first questions get different keys;
two asking the very same first question share a key, and a cached prefix.

The key is a digest, never the text: it may be logged and traced, and a
prompt or a person's id must not be.
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import blake2b
from typing import Any

import orjson

SESSION_HEADER = "x-llmgw-session"
# A completion's prompt grows turn by turn at its end; its head is what stays.
PROMPT_HEAD = 4096


def _digest(*parts: bytes) -> str:
    h = blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))  # so ("ab", "c") and ("a", "bc") differ
        h.update(part)
    return h.hexdigest()


def _bytes(content: Any) -> bytes:
    if isinstance(content, str):
        return content.encode()
    try:
        return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(content).encode()


def _header(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    value = headers.get(SESSION_HEADER)
    if value is None:
        # A plain dict is case-sensitive where HTTP headers are not.
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == SESSION_HEADER), None)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _conversation_start(body: Mapping[str, Any]) -> tuple[bytes, bytes] | None:
    """The system prompt and the first user message, in whichever API's shape the body is."""
    system: list[Any] = []
    first_user: Any = None
    messages = body.get("messages")
    if isinstance(messages, list):  # chat completions; Anthropic messages
        if body.get("system") is not None:
            system.append(body["system"])
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            if role in ("system", "developer"):
                system.append(message.get("content"))
            elif role == "user":
                first_user = message.get("content")
                break
    elif "input" in body:  # responses
        if body.get("instructions") is not None:
            system.append(body["instructions"])
        items = body["input"]
        if isinstance(items, str):
            first_user = items
        elif isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
                    system.append(item.get("content"))
                elif isinstance(item, Mapping) and item.get("role") == "user":
                    first_user = item.get("content")
                    break
    elif "prompt" in body:  # completions
        prompt = body["prompt"]
        if isinstance(prompt, list) and prompt:
            prompt = prompt[0]
        if isinstance(prompt, (str, list)):  # text, or token ids
            first_user = prompt[:PROMPT_HEAD]
    if first_user is None and not system:
        return None
    return _bytes(system), _bytes(first_user)


def session_key(body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> str | None:
    """The key that keeps this request's conversation on one replica, or None when nothing says."""
    header = _header(headers)
    if header is not None:
        return "header:" + _digest(header.encode())
    if not isinstance(body, Mapping):
        return None
    user = body.get("user")
    if not (isinstance(user, str) and user):
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    if isinstance(user, str) and user:
        return "user:" + _digest(user.encode())
    start = _conversation_start(body)
    if start is None:
        return None
    return "prompt:" + _digest(*start)
