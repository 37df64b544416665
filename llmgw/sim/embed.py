"""Embeddings from a hash: the same text always the same unit vector, nothing more.

Similar texts do not get similar vectors; a test that needs nearness needs
a real model. What the sim promises is determinism and the wire format.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct

DIMENSIONS = 64
_PACK = struct.Struct(f"<{DIMENSIONS}f")


def vector(key: bytes, dimensions: int = DIMENSIONS) -> tuple[float, ...]:
    """A unit vector of float32 values (exactly what the base64 form carries) for `key`."""
    digest = hashlib.blake2b(key, digest_size=DIMENSIONS, person=b"llmgw-sim").digest()
    raw = [b - 127.5 for b in digest[:dimensions]]
    norm = math.sqrt(sum(x * x for x in raw))
    unit = [x / norm for x in raw]
    # Rounded to float32 here, so the JSON floats and the base64 bytes agree.
    return struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *unit))


def as_base64(values: tuple[float, ...]) -> str:
    """OpenAI's base64 encoding: the float32 values, little-endian, back to back."""
    packed = _PACK.pack(*values) if len(values) == DIMENSIONS else struct.pack(f"<{len(values)}f", *values)
    return base64.b64encode(packed).decode()


def key_of(item: str | list[int]) -> bytes:
    """What an input is hashed as: a text's UTF-8, or a token list's numbers."""
    if isinstance(item, str):
        return b"t:" + item.encode()
    return b"i:" + ",".join(map(str, item)).encode()
