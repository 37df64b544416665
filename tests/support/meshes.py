"""A small GLB (binary glTF 2.0) made for a test: a JSON chunk and a BIN chunk."""

from __future__ import annotations

import json
import struct


def glb(doc: dict, binary: bytes = b"\x01\x02\x03\x04") -> bytes:
    body = json.dumps(doc).encode()
    body += b" " * (-len(body) % 4)
    chunks = struct.pack("<II", len(body), 0x4E4F534A) + body + struct.pack("<II", len(binary), 0x004E4942) + binary
    return b"glTF" + struct.pack("<II", 2, 12 + len(chunks)) + chunks
