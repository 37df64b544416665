"""OpenAI's Responses API (/v1/responses): translated to chat for the engine and back (router.translate.responses).

OpenAI's error objects; once a stream has begun, a refusal is its
`response.failed` events. Hosted tools the engine cannot run are dropped
and named back to the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.chunks import chat_chunks
from llmgw.router.relay import TranslatedStream
from llmgw.router.translate import responses as resp_api
from llmgw.router.translate.common import encode_sse
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.call import Call
    from llmgw.router.guarded import ChunkGuard
    from llmgw.router.registry import ModelEntry


class Responses(Shape):
    api = "responses"
    route = "/v1/responses"

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        upstream = resp_api.responses_to_chat(body, upstream_model=model)
        return Prepared(upstream, bool(upstream.get("stream")), False, tuple(resp_api.hosted_tools(body)))

    def stream_refusal(self, call: Call, status: int, message: str, code: str) -> bytes:
        return encode_sse(resp_api.ResponsesStream(model=call.model.name, request=call.client_body)
                          .error(message, code=code))

    def whole(self, call: Call, answer: JSON, engine_bytes: bytes) -> tuple[JSON, bytes]:
        sent = resp_api.chat_to_response(answer, model=call.model.name, request=call.client_body)
        return sent, orjson.dumps(sent)

    def stream(self, call: Call, guard: ChunkGuard | None) -> TranslatedStream:
        translator = resp_api.ResponsesStream(model=call.model.name, request=call.client_body)
        return TranslatedStream(call, translator, encode_sse, guard)

    def replay_json(self, answer: bytes, *, model: str, request: JSON) -> bytes:
        kept = orjson.loads(answer)
        return orjson.dumps(resp_api.chat_to_response(kept, model=model or kept.get("model") or "", request=request))

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        kept = orjson.loads(answer)
        translator = resp_api.ResponsesStream(model=model or kept.get("model") or "", request=request)
        events = [event for chunk in chat_chunks(kept, True) for event in translator.feed(chunk)]
        return encode_sse(events + translator.finish())


RESPONSES = Responses()
