"""Refuse a request for what its model cannot do, before any replica is asked.

Passed on, such a request fails in the engine (llama.cpp answers 501 to
embeddings on a chat model, 500 to an image on a text model), which costs a
replica's time, says nothing useful to the client and, for a 5xx, counts
against the model's breaker (issue 11, item 2).
"""

from __future__ import annotations

from typing import Any

from llmgw.config.capabilities import refusal
from llmgw.router.call import Refuse
from llmgw.router.registry import ModelEntry
from llmgw.router.translate import anthropic as anth

# The endpoint each API shape is: Messages and Responses are chat to the engine.
_ENDPOINT = {"chat": "chat", "messages": "chat", "responses": "chat", "completions": "completions",
             "embeddings": "embeddings"}


def needs(api: str, client_body: dict, upstream: dict) -> list[tuple[str, str]]:
    """What a request asks of its model: (capability, the request's field that asks it), endpoint first."""
    wanted = [(_ENDPOINT.get(api, "chat"), "model")]
    if api == "embeddings":
        return wanted
    if _has_images(upstream.get("messages")):
        wanted.append(("vision", "messages"))
    if upstream.get("tools") or upstream.get("functions"):
        wanted.append(("tools", "tools"))
    if _thinks(api, client_body, upstream):
        wanted.append(("thinking", "thinking" if api == "messages" else "reasoning_effort"))
    return wanted


def check(entry: ModelEntry, api: str, client_body: dict, upstream: dict) -> None:
    """Refuse (400, `unsupported_capability`) the first thing asked that `entry` does not do."""
    can = entry.settings.can
    for capability, param in needs(api, client_body, upstream):
        if capability not in can:
            raise Refuse(400, refusal(entry.name, can, capability), "unsupported_capability", param=param)


def _has_images(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False


def _thinks(api: str, client_body: dict, upstream: dict) -> bool:
    # A model whose thinking mode is "" gets no field from a Messages request;
    # the client still asked for thinking, so the client's body is read too.
    if api == "messages" and anth.wants_thinking(client_body):
        return True
    effort = upstream.get("reasoning_effort")
    if isinstance(effort, str) and effort not in ("none", ""):
        return True
    kwargs = upstream.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True
