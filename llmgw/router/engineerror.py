"""What a client is told when an engine or provider refuses its request.

A 4xx is the engine's verdict on this request (too long a prompt, a bad
parameter): its own words help the client fix it, so they are relayed,
trimmed to a sentence's length and stripped of control characters. A 5xx
says something about the engine, not the request: its text can carry a
stack trace, an internal address or — from an outside provider — whatever
that server chose to echo back (issue 10), so the client gets our sentence
instead and the status alone says what the engine answered.
"""

from __future__ import annotations

import orjson

# Long enough for any validation message an engine writes (vLLM's longest
# seen is ~300 characters), short enough that an echoed body is not relayed.
MAX_RELAYED = 500


def refusal_message(status: int, raw: bytes, model: str) -> str:
    """The sentence for an engine's refusal with `status` and body `raw`."""
    if status < 500:
        text = _engine_text(raw)
        if text:
            return text
        return f"the engine for {model} refused this request ({status})"
    return f"the engine for {model} could not answer this request ({status}); try again, or change the request"


def _engine_text(raw: bytes) -> str | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        text = error.get("message")
    elif isinstance(error, str):
        text = error
    else:
        text = body.get("message")
    if not isinstance(text, str):
        return None
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    if len(text) > MAX_RELAYED:
        text = text[:MAX_RELAYED - 1].rstrip() + "…"
    return text or None
