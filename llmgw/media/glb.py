"""A mesh's GLB (binary glTF 2.0) with facts written into its `asset.extras`, where glTF keeps what its writer
wants carried with the asset: Blender and three.js keep them, and any glTF reader shows them.

A GLB is a 12-byte header (magic "glTF", version 2, total length), a JSON
chunk (padded with spaces to 4 bytes), then the chunks after it (the BIN
chunk of buffers) as they were. Only the JSON chunk is rewritten.
"""

from __future__ import annotations

import json
import struct
from typing import Any

MAGIC = b"glTF"
_JSON = 0x4E4F534A  # "JSON"


def is_glb(data: bytes) -> bool:
    return len(data) >= 20 and data[:4] == MAGIC


def _split(glb: bytes) -> tuple[dict[str, Any], bytes]:
    if not is_glb(glb):
        raise ValueError("this is not a GLB: it does not begin with glTF's magic")
    version, length = struct.unpack_from("<II", glb, 4)
    if version != 2 or length != len(glb):
        raise ValueError(f"this GLB says version {version} and {length} bytes; a glTF 2.0 GLB of "
                         f"{len(glb)} bytes was expected")
    size, kind = struct.unpack_from("<II", glb, 12)
    if kind != _JSON or 20 + size > len(glb):
        raise ValueError("this GLB's first chunk is not its JSON")
    try:
        doc = json.loads(glb[20:20 + size])
    except ValueError as e:
        raise ValueError(f"this GLB's JSON cannot be read: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("this GLB's JSON is not an object")
    return doc, glb[20 + size:]


def with_extras(glb: bytes, extras: dict[str, Any]) -> bytes:
    """`glb` with `extras` merged into its asset.extras (a key given replaces the one there)."""
    doc, rest = _split(glb)
    asset = doc.setdefault("asset", {"version": "2.0"})
    if not isinstance(asset, dict):
        raise ValueError("this GLB's asset is not an object")
    held = asset.get("extras")
    asset["extras"] = {**(held if isinstance(held, dict) else {}), **extras}
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    body += b" " * (-len(body) % 4)
    out = struct.pack("<II", len(body), _JSON) + body + rest
    return MAGIC + struct.pack("<II", 2, 12 + len(out)) + out


def extras(glb: bytes) -> dict[str, Any]:
    """The GLB's asset.extras ({} when it has none)."""
    doc, _ = _split(glb)
    asset = doc.get("asset")
    held = asset.get("extras") if isinstance(asset, dict) else None
    return held if isinstance(held, dict) else {}
