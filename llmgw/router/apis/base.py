"""What every API shape does, in the OpenAI way that chat, completions and embeddings share.

A `Shape` is chosen once per request, by the route it came in on
(llmgw.router.apis.SHAPES), and is asked at each point where the client's
API and the engine's chat completions differ: reading the body, the refusal's
shape, the answer whole or streamed, a refusal once a stream has begun, a
kept answer given again. The defaults here pass the body and the answer
through as OpenAI's; Messages and Responses translate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, NamedTuple

import orjson
from aiohttp import web

from llmgw.router.call import Refuse
from llmgw.router.errors import api_error, error_body
from llmgw.router.relay import StreamScanner, TranslatedStream
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.call import Call
    from llmgw.router.guarded import ChunkGuard
    from llmgw.router.registry import ModelEntry


class Prepared(NamedTuple):
    """A client's body made into the engine's: the body, whether it streams, whether the client wants usage."""

    upstream: JSON
    stream: bool
    wants_usage: bool
    # Responses' hosted tools the engine cannot run, named back to the client (call.tools_dropped).
    tools_dropped: tuple[str, ...] = ()


class Shape(ABC):
    """One client API: its route, what the engine is asked, and how answers and refusals look in it."""

    api: str  # its name in usage rows, metrics and the cache's key: chat, completions, …
    route: str  # the client's path, /v1/…
    upstream_path: str = "/chat/completions"  # the engine's endpoint the request becomes
    engine_api: str = "chat"  # the shape of the body the engine is sent: chat, completions or embeddings
    answers_text = True  # an answer the output guardrails read (embeddings: vectors)
    cached = True  # whether the answer cache keeps and gives its answers
    conversational = True  # a conversation whose questions --similar compares
    operation = "chat"  # the OpenTelemetry GenAI operation its spans are named by (router.trace)
    thinking_field = "reasoning_effort"  # the client's field that asks for thinking, for a refusal to name

    @abstractmethod
    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        """The engine's request; raises shapes.ShapeError, TranslateError or Refuse for a body that does not fit."""

    def asks_thinking(self, client_body: JSON) -> bool:
        """Whether the client's own body asks for thinking, beyond what the engine's body says."""
        return False

    def error(self, status: int, message: str, code: str, param: str | None,
              headers: dict[str, str]) -> web.Response:
        """A refusal before the answer began, in this API's error shape."""
        return api_error(status, message, code, param=param, headers=headers)

    def stream_refusal(self, call: Call, status: int, message: str, code: str) -> bytes:
        """A refusal after the stream began (its status already 200): this API's error event."""
        return b"data: " + orjson.dumps(error_body(status, message, code)) + b"\n\n"

    def whole(self, call: Call, answer: JSON, engine_bytes: bytes) -> tuple[JSON, bytes]:
        """The unstreamed answer as the client gets it, and its bytes.

        `answer` is the engine's (as the output guardrails left it);
        `engine_bytes` what the engine sent, given as they are when nothing
        changed them: no second encoding on the hot path.
        """
        if call.checker is not None:
            return answer, orjson.dumps(answer)
        return answer, engine_bytes

    def stream(self, call: Call, guard: ChunkGuard | None) -> StreamScanner | TranslatedStream:
        """What the engine's events pass through on their way to the client."""
        return StreamScanner(call, guard)

    def replay_json(self, answer: bytes, *, model: str, request: JSON) -> bytes:
        """A kept answer (the engine's JSON) as an unstreamed response body in this shape."""
        return answer  # the bytes the first client got: no second encoding

    @abstractmethod
    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        """A kept answer as one write of Server-Sent Events in this shape, ending as a stream ends."""


def openai_stream(body: JSON) -> tuple[JSON, bool, bool]:
    """`stream` and `stream_options` of a chat or completions body: (the engine's body, stream, wants usage)."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise Refuse(400, '"stream" must be true or false', "invalid_request", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise Refuse(400, '"stream_options" must be an object', "invalid_request", param="stream_options")
    wants = bool(options and options.get("include_usage"))
    if stream:
        # Always asked of the engine: tokens are what limits and budgets count.
        body = {**body, "stream_options": {**(options or {}), "include_usage": True}}
    return body, stream, wants
