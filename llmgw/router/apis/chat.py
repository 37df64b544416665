"""OpenAI's Chat Completions (/v1/chat/completions): the engines' own API, passed on as the client sent it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from llmgw.router import shapes
from llmgw.router.apis.base import Prepared, Shape, openai_stream
from llmgw.router.call import Refuse
from llmgw.router.chunks import chat_chunks, sse_data
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.registry import ModelEntry


class Chat(Shape):
    api = "chat"
    route = "/v1/chat/completions"

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        # What does not fit the schema is refused before the guardrails read it (shapes.py).
        shapes.check(self.api, body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Refuse(400, '"messages" must be a non-empty list of messages', "invalid_request", param="messages")
        if not all(isinstance(m, dict) for m in messages):
            raise Refuse(400, 'each of "messages" must be an object with a role and content', "invalid_request",
                         param="messages")
        return Prepared(*openai_stream(body))

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        return sse_data(chat_chunks(orjson.loads(answer), include_usage))


CHAT = Chat()
