"""Refuse a request for what its model cannot do, before any replica is asked.

Passed on, such a request fails in the engine (llama.cpp answers 501 to
embeddings on a chat model, 500 to an image on a text model), which costs a
replica's time, says nothing useful to the client and, for a 5xx, counts
against the model's breaker (issue 11, item 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgw.config.capabilities import refusal
from llmgw.router.apis import SHAPES, Shape
from llmgw.router.call import Refuse
from llmgw.router.registry import ModelEntry
from llmgw.router.wire import JSON

# Whether a request asks a capability, read from (the client's body, the engine's).
Asks = Callable[[JSON, JSON], bool]
# (capability, the request's field that asks it, whether a request asks it).
Asked = tuple[tuple[str, str, Asks], ...]


def needs(api: str, client_body: JSON, upstream: JSON) -> list[tuple[str, str]]:
    """What a request asks of its model: (capability, the request's field that asks it), endpoint first."""
    return [(c, param) for c, param, asks in _asked(api) if asks(client_body, upstream)]


def check(entry: ModelEntry, api: str, client_body: JSON, upstream: JSON) -> None:
    """Refuse (400, `unsupported_capability`) the first thing asked that `entry` does not do.

    A request is read only for what the model does not do, since this runs
    on every request: a model that does everything (the default for one
    from the settings) reads nothing of it (0.6 µs on the 2-core dev
    machine), one without vision scans the messages once (2.8 µs for a
    21-message chat).
    """
    can = entry.settings.can
    for capability, param, asks in _asked(api):
        if capability not in can and asks(client_body, upstream):
            raise Refuse(400, refusal(entry.name, can, capability), "unsupported_capability", param=param)


def _asked(api: str) -> Asked:
    return _ASKED.get(api) or _ASKED["chat"]


def _always(_client: JSON, _upstream: JSON) -> bool:
    return True


def _ask(shape: Shape) -> Asked:
    # The endpoint the shape is to the engine: Messages and Responses are chat.
    endpoint = shape.engine_api
    if endpoint in ("embeddings", "images", "workflows"):
        return ((endpoint, "model", _always),)
    return ((endpoint, "model", _always),
            ("vision", "messages", lambda _, up: _has_images(up.get("messages"))),
            ("tools", "tools", lambda _, up: bool(up.get("tools") or up.get("functions"))),
            ("thinking", shape.thinking_field, lambda client, up: _thinks(shape, client, up)))


# What each API shape's requests may ask, made once.
_ASKED = {shape.api: _ask(shape) for shape in SHAPES}


def _has_images(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if message.__class__ is dict else None
        # Most messages are a string: only a list of parts can hold an image.
        if content.__class__ is list and any(p.__class__ is dict and p.get("type") == "image_url" for p in content):
            return True
    return False


def _thinks(shape: Shape, client_body: JSON, upstream: JSON) -> bool:
    # The client's body too: a field the engine's body may not carry (Messages' `thinking`).
    if shape.asks_thinking(client_body):
        return True
    effort = upstream.get("reasoning_effort")
    if isinstance(effort, str) and effort not in ("none", ""):
        return True
    kwargs = upstream.get("chat_template_kwargs")
    return isinstance(kwargs, dict) and kwargs.get("enable_thinking") is True
