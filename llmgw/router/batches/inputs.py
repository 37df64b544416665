"""A batch's input file, read and checked line by line before anything is kept or sent.

Each line is one request: {"custom_id", "method": "POST", "url", "body"}, as
OpenAI's batch API takes it. A file that breaks a rule is refused whole at
upload with a sentence naming its first bad line, so that a batch never
fails at line 40,000 for what could have been said at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings")
MAX_CUSTOM_ID = 512  # characters; a custom id is the caller's own key to an answer, not a payload


class InputError(Exception):
    """The file breaks a rule; the message names the line."""


@dataclass(frozen=True)
class Line:
    number: int  # from 1, as an editor counts the file's lines
    custom_id: str
    url: str
    body: dict[str, Any]


def read_lines(content: bytes, max_lines: int) -> list[Line]:
    """The file's requests in order, or InputError naming the first line that is not one."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"the file is not UTF-8 text (a byte at offset {e.start} is not); a batch's input is "
                         "JSON lines") from None
    rows = text.split("\n")
    while rows and not rows[-1].strip():
        rows.pop()  # the file's last newline, and blank lines after the last request
    if not rows:
        raise InputError("the file has no requests; a batch's input is one JSON request a line")
    if len(rows) > max_lines:
        raise InputError(f"the file has {len(rows)} requests; a batch takes at most {max_lines} "
                         "(router.batch.max_lines): split it into several batches")
    seen: dict[str, int] = {}
    lines = []
    for number, row in enumerate(rows, start=1):
        line = _line(number, row)
        first = seen.setdefault(line.custom_id, number)
        if first != number:
            raise InputError(f"line {number}: custom_id {line.custom_id!r} is also on line {first}; each request "
                             "needs a custom_id of its own, to find its answer by")
        lines.append(line)
    return lines


def _line(number: int, row: str) -> Line:
    where = f"line {number}"
    if not row.strip():
        raise InputError(f"{where} is empty; each line is one request, with no blank lines between")
    try:
        doc = orjson.loads(row)
    except orjson.JSONDecodeError as e:
        raise InputError(f"{where} is not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(doc, dict):
        raise InputError(f'{where} is not a JSON object; each line is {{"custom_id", "method", "url", "body"}}')
    custom_id = doc.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise InputError(f'{where} needs "custom_id": text of your own that its answer will carry')
    if len(custom_id) > MAX_CUSTOM_ID:
        raise InputError(f"{where}: custom_id is {len(custom_id)} characters; at most {MAX_CUSTOM_ID}")
    if doc.get("method") != "POST":
        raise InputError(f'{where}: "method" must be "POST", got {doc.get("method")!r}')
    url = doc.get("url")
    if url not in ENDPOINTS:
        raise InputError(f'{where}: "url" must be one of {", ".join(ENDPOINTS)}, got {url!r}')
    body = doc.get("body")
    if not isinstance(body, dict):
        raise InputError(f'{where}: "body" must be the request as a JSON object')
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InputError(f'{where}: the body needs "model": the name of a model (GET /v1/models lists them)')
    if body.get("stream"):
        raise InputError(f'{where}: a batch\'s requests are answered whole: "stream" must be false or left out')
    unknown = set(doc) - {"custom_id", "method", "url", "body"}
    if unknown:
        raise InputError(f"{where} has {', '.join(sorted(unknown))}, which a batch line does not take; "
                         'it takes "custom_id", "method", "url" and "body"')
    return Line(number, custom_id, url, body)
