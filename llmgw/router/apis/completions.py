"""OpenAI's legacy Completions (/v1/completions): a prompt, not a conversation; passed on as sent."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from llmgw.router import shapes
from llmgw.router.apis.base import Prepared, Shape, openai_stream
from llmgw.router.call import Refuse
from llmgw.router.chunks import completion_chunks, sse_data
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.registry import ModelEntry


class Completions(Shape):
    api = "completions"
    route = "/v1/completions"
    upstream_path = "/completions"
    engine_api = "completions"
    operation = "text_completion"
    conversational = False

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        shapes.check(self.api, body)
        if not isinstance(body.get("prompt"), (str, list)):
            raise Refuse(400, '"prompt" must be text or a list of texts', "invalid_request", param="prompt")
        return Prepared(*openai_stream(body))

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        return sse_data(completion_chunks(orjson.loads(answer), include_usage))


COMPLETIONS = Completions()
