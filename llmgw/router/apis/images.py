"""OpenAI's Images (/v1/images/generations): a picture from a prompt, made by a ComfyUI model's workflow or passed
to an outside provider's images endpoint as it came.

Never streamed and never kept by the answer cache (a picture asked twice is
two pictures: the seed differs). The prompt is read by the input guardrails
as a user's turn; no output guardrail reads a picture. Each picture made is
charged at the model's `price.per_image`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.call import Refuse
from llmgw.router.wire import JSON

if TYPE_CHECKING:
    from llmgw.router.call import Call
    from llmgw.router.registry import ModelEntry

_SIZE = re.compile(r"^([1-9][0-9]{1,4})x([1-9][0-9]{1,4})$")
FORMATS = ("b64_json", "url")
# OpenAI's fields a ComfyUI workflow has no use for: taken and left aside, so the SDK's calls that set them work.
IGNORED = ("quality", "style", "user", "background", "moderation", "output_compression", "partial_images")


def size_of(body: JSON) -> tuple[int, int] | None:
    """`size` as (width, height); None for none or "auto". Checked by prepare()."""
    size = body.get("size")
    if size is None or size == "auto":
        return None
    m = _SIZE.match(size)
    assert m is not None
    return int(m.group(1)), int(m.group(2))


class Images(Shape):
    api = "images"
    route = "/v1/images/generations"
    upstream_path = "/images/generations"
    engine_api = "images"
    operation = "generate_content"
    answers_text = False
    cached = False
    conversational = False

    def prepare(self, body: JSON, *, model: str, entry: ModelEntry) -> Prepared:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise Refuse(400, '"prompt" must be the text of what to picture', "invalid_request", param="prompt")
        size = body.get("size")
        if size is not None and (not isinstance(size, str) or (size != "auto" and not _SIZE.match(size))):
            raise Refuse(400, f'"size" must be WIDTHxHEIGHT like "1024x1024", or "auto", got {size!r}',
                         "invalid_request", param="size")
        fmt = body.get("response_format")
        if fmt is not None and fmt not in FORMATS:
            raise Refuse(400, f'"response_format" must be "b64_json" or "url", got {fmt!r}', "invalid_request",
                         param="response_format")
        output = body.get("output_format")
        if output is not None and output != "png" and entry.settings.comfyui is not None:
            raise Refuse(400, f'{model} makes PNG pictures: "output_format" must be "png" or left out, got {output!r}',
                         "invalid_request", param="output_format")
        if body.get("stream") not in (None, False):
            raise Refuse(400, 'pictures are answered whole here: "stream" must be false or left out',
                         "invalid_request", param="stream")
        return Prepared(body, False, False)

    def whole(self, call: Call, answer: JSON, engine_bytes: bytes) -> tuple[JSON, bytes]:
        # An outside provider's pictures are charged as our own are: one price each, from what it answered.
        data = answer.get("data")
        if isinstance(data, list):
            call.images = len(data)
        return super().whole(call, answer, engine_bytes)

    def replay_stream(self, answer: bytes, *, model: str, request: JSON, include_usage: bool) -> bytes:
        raise ValueError("pictures are never streamed")


IMAGES = Images()
