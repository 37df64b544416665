"""Reading and writing a store's tables behind the Store's back, the way an
administrator with psql or sqlite3 would: for tests that need a state the
Store itself never makes (a schema from a newer llmgw)."""

from __future__ import annotations

from typing import Any

import apsw
import asyncpg

from llmgw.store.sqlite import sqlite_path


async def raw_fetch(url: str, sql: str, *args: Any) -> list[tuple]:
    """Rows of `sql` (with $1 placeholders) run on the store at `url`."""
    if url.startswith("sqlite:"):
        conn = apsw.Connection(sqlite_path(url))
        try:
            return [tuple(r) for r in conn.execute(sql.replace("$", "?"), args or None).fetchall()]
        finally:
            conn.close()
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()
