"""Anthropic's Messages API (/v1/messages): translated to chat for the engine and back (router.translate.anthropic).

Its refusals are Anthropic's error objects and events, since the Anthropic
SDK reads no other shape; thinking is asked by its own `thinking` field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.chunks import chat_chunks
from llmgw.router.relay import TranslatedStream
from llmgw.router.translate import anthropic as anth
from llmgw.router.translate.common import encode_sse
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.call import Call
    from llmgw.router.guarded import ChunkGuard
    from llmgw.router.registry import ModelEntry


class Messages(Shape):
    api = "messages"
    route = "/v1/messages"
    thinking_field = "thinking"

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        upstream = anth.messages_to_chat(body, upstream_model=model, thinking_mode=entry.settings.thinking)
        return Prepared(upstream, bool(upstream.get("stream")), False)

    def asks_thinking(self, client_body: JSON) -> bool:
        # A model whose thinking mode is "" gets no field from a Messages
        # request; the client still asked for thinking.
        return anth.wants_thinking(client_body)

    def error(self, status: int, message: str, code: str, param: str | None,
              headers: dict[str, str]) -> web.Response:
        return web.Response(status=status, body=orjson.dumps(anth.anthropic_error(status, message)),
                            content_type="application/json", headers=headers)

    def stream_refusal(self, call: Call, status: int, message: str, code: str) -> bytes:
        return encode_sse([("error", anth.anthropic_error(status, message))])

    def whole(self, call: Call, answer: JSON, engine_bytes: bytes) -> tuple[JSON, bytes]:
        sent = anth.chat_to_message(answer, model=call.model.name,
                                    include_thinking=anth.wants_thinking(call.client_body))
        return sent, orjson.dumps(sent)

    def stream(self, call: Call, guard: ChunkGuard | None) -> TranslatedStream:
        translator = anth.MessagesStream(model=call.model.name, include_thinking=anth.wants_thinking(call.client_body))
        return TranslatedStream(call, translator, encode_sse, guard)

    def replay_json(self, answer: bytes, *, model: str, request: JSON) -> bytes:
        kept = orjson.loads(answer)
        return orjson.dumps(anth.chat_to_message(kept, model=model or kept.get("model") or "",
                                                 include_thinking=anth.wants_thinking(request)))

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        kept = orjson.loads(answer)
        translator = anth.MessagesStream(model=model or kept.get("model") or "",
                                         include_thinking=anth.wants_thinking(request))
        events = [event for chunk in chat_chunks(kept, True) for event in translator.feed(chunk)]
        return encode_sse(events + translator.finish())


MESSAGES = Messages()
