"""A run's file inputs (a picture to start from, a mask): a `file-…` id of the caller's project, a data URL, or
base64; read here and uploaded to the replica that runs the workflow."""

from __future__ import annotations

import base64
import binascii
import re

from llmgw.account import Principal
from llmgw.router.batches.keeper import FileKeeper, is_file_id
from llmgw.router.call import Refuse

_DATA_URL = re.compile(r"^data:([a-z]+/[a-z0-9.+-]+)?(;[a-z0-9=-]+)*;base64,", re.IGNORECASE)
_SIGNATURES = {b"\x89PNG\r\n\x1a\n": ".png", b"\xff\xd8\xff": ".jpg", b"RIFF": ".webp", b"GIF8": ".gif"}


async def read_file_input(keeper: FileKeeper, principal: Principal, name: str, value: str,
                          most: int) -> tuple[bytes, str]:
    """The bytes of input `name` and a file name for them (its kind's extension); Refuse, naming the input, when the
    value is none of the three forms, is not this project's file, or is larger than `most` bytes."""
    if is_file_id(value):
        stored = await keeper.store.file_by_id(value)
        if stored is None or stored.project_id != principal.path.project.id:
            raise Refuse(404, f"{name}: there is no file {value} in this key's project; POST /v1/files uploads one",
                         "file_not_found", param=name)
        if stored.bytes > most:
            raise _too_large(name, stored.bytes, most)
        data = await keeper.read(stored)
        if data is None:
            raise Refuse(409, f"{name}: the bytes of {value} are on a control plane that no longer leads; upload it "
                              "again", "file_unavailable", param=name)
    else:
        text = value
        m = _DATA_URL.match(text)
        if m is not None:
            text = text[m.end():]
        if len(text) * 3 // 4 > most:
            raise _too_large(name, len(text) * 3 // 4, most)
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise Refuse(400, f"{name}: expected a file-… id from /v1/files, a data URL or base64, and this is none "
                              "of them", "invalid_request", param=name) from None
    if not data:
        raise Refuse(400, f"{name}: the file is empty", "invalid_request", param=name)
    suffix = next((ext for sig, ext in _SIGNATURES.items() if data.startswith(sig)), ".bin")
    return data, f"{name}{suffix}"


def _too_large(name: str, size: int, most: int) -> Refuse:
    return Refuse(413, f"{name}: {size} bytes is more than the {most} a run's file may be", "file_too_large",
                  param=name)
