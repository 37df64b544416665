"""The sim-engine's /v1/images/generations: an outside provider's pictures in OpenAI's shape, for testing the
router's pass-through of pictures to a provider (docs/media.md). Real PNGs of the size asked, a pattern of the
prompt and the picture's number, so the same request gives the same pictures."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from typing import Any

import orjson

from llmgw.media import encode_png
from llmgw.sim.plans import Refused

_SIZE = re.compile(r"^(\d{1,4})x(\d{1,4})$")
MOST_SIDE = 2048
MOST_N = 10


def _picture(prompt: str, n: int, width: int, height: int) -> bytes:
    seed = hashlib.sha256(f"{prompt}\0{n}".encode()).digest()
    row = bytes(seed[(x * 3 + c) % 32] ^ (x & 0xFF) for x in range(width) for c in range(3))
    return encode_png(width, height, b"".join(bytes((b + y) & 0xFF for b in row) for y in range(height)))


def images_body(body: Any, model: str) -> bytes:
    if not isinstance(body, dict):
        raise Refused(400, "the body must be a JSON object")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise Refused(400, "prompt is required", "prompt")
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MOST_N:
        raise Refused(400, f"n must be a whole number from 1 to {MOST_N}", "n")
    size = body.get("size") or "256x256"
    m = _SIZE.match(size) if isinstance(size, str) else None
    if m is None or not all(1 <= int(v) <= MOST_SIDE for v in m.groups()):
        raise Refused(400, f"size must be WIDTHxHEIGHT, each from 1 to {MOST_SIDE}", "size")
    width, height = int(m.group(1)), int(m.group(2))
    pictures = [_picture(prompt, i, width, height) for i in range(n)]
    if body.get("response_format") == "url":
        data = [{"url": "data:image/png;base64," + base64.b64encode(p).decode()} for p in pictures]
    else:
        data = [{"b64_json": base64.b64encode(p).decode()} for p in pictures]
    return orjson.dumps({"created": int(time.time()), "data": data, "model": model, "size": size,
                         "output_format": "png"})
