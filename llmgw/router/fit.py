"""A `max_tokens` the model's context cannot hold, lowered to what the context leaves.

Agent clients send the longest answer they would take, not one they need:
Claude Code 2.1 asks for 32000 tokens on every request, and a model with a
32k context refused every one of them ("you requested 35022 tokens", issue
25, item 22). So a request whose prompt and `max_tokens` together pass the
model's context is sent with `max_tokens` lowered to the room the prompt
leaves, and the client is told (X-Llmgw-Max-Tokens-Lowered: 32000->7010,
and the usage row's detail.max_tokens_lowered). The same for every API
shape, read from the engine's request each became (docs/api-shapes.md).

The prompt's length is the router's estimate (router.tally), about four
characters a token. Code and JSON schemas run nearer three, and the chat
template adds tokens of its own, so a quarter of the estimate more is held
back; a prompt that fills the context even without that margin is passed
on as it is, for the engine to refuse with the prompt's exact length.
"""

from __future__ import annotations

from typing import Any

from llmgw.router.tally import estimate_prompt_tokens

FIELDS = ("max_tokens", "max_completion_tokens")


def fit_max_tokens(upstream: dict[str, Any], api: str, context: int) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """The engine's request with its answer's limit fitted to `context` (0: unknown, nothing changes).

    Returns the request (a new dict when changed: the client's own body is
    never written to) and (asked, sent) when the limit was lowered.
    """
    if context <= 0:
        return upstream, None
    field = next((f for f in FIELDS if isinstance(upstream.get(f), int) and not isinstance(upstream[f], bool)), None)
    if field is None:
        return upstream, None
    asked = upstream[field]
    prompt = estimate_prompt_tokens(upstream, api)
    if asked + prompt + prompt // 4 <= context:
        return upstream, None
    room = context - prompt - prompt // 4
    if room < 1:
        room = context - prompt
    if room < 1 or room >= asked:
        return upstream, None
    return {**upstream, field: room}, (asked, room)
