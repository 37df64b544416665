"""JSON text columns, as every part of SQLStore writes and reads them.

JSON is kept as text rather than PostgreSQL's jsonb so that one statement
serves both dialects; None stays SQL NULL rather than the text "null".
"""

from __future__ import annotations

from typing import Any

import orjson


def dump_json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def load_json(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)
