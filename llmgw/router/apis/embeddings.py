"""OpenAI's Embeddings (/v1/embeddings): vectors, never streamed, never kept, read by no output guardrail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.router import shapes
from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.call import Refuse
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.registry import ModelEntry


class Embeddings(Shape):
    api = "embeddings"
    route = "/v1/embeddings"
    upstream_path = "/embeddings"
    engine_api = "embeddings"
    operation = "embeddings"
    answers_text = False
    cached = False
    conversational = False

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        shapes.check(self.api, body)
        given = body.get("input")
        if not isinstance(given, (str, list)) or given in ("", []):
            raise Refuse(400, '"input" must be text or a non-empty list', "invalid_request", param="input")
        if not isinstance(body.get("stream", False), bool):
            raise Refuse(400, '"stream" must be true or false', "invalid_request", param="stream")
        return Prepared(body, False, False)

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        raise ValueError("embeddings are never streamed")


EMBEDDINGS = Embeddings()
