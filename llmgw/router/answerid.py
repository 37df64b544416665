"""The id an answer gave the client, so `llmgw ctl request ID` finds the request by it.

SDK users hold the answer's id (chatcmpl-…, msg_…, resp_…), rarely the
x-request-id header (issue 11, item 4). It is read from what the client was
sent, whatever made it: the engine's answer passed on, a translation to
Anthropic's or the Responses shape, or a cached answer replayed.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmgw.router import sse


def answer_id(answer: Any) -> str | None:
    """The top-level id of an answer or of a stream's first event.

    A chat answer and its chunks carry it at the top ("id"); Anthropic's
    message_start event under "message", the Responses API's
    response.created under "response". Only the top level is read: an
    engine may write "choices" (with tool calls' own ids) before "id".
    """
    if not isinstance(answer, dict):
        return None
    found = answer.get("id")
    if isinstance(found, str) and found:
        return found
    for holder in ("message", "response"):
        inner = answer.get(holder)
        if isinstance(inner, dict):
            found = inner.get("id")
            if isinstance(found, str) and found:
                return found
    return None


def stream_answer_id(block: bytes) -> str | None:
    """The id in the first event of a stream's bytes that carries one; None when none does."""
    for payload in sse.payloads(block):
        if payload[:1] != b"{":
            continue
        try:
            found = answer_id(orjson.loads(payload))
        except orjson.JSONDecodeError:
            continue
        if found:
            return found
    return None


def whole_answer_id(body: bytes) -> str | None:
    try:
        return answer_id(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None
