"""Printing: a table for people, one JSON document with --json for scripts."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    line = "  ".join(h.upper().ljust(widths[i]) for i, h in enumerate(headers))
    print(line.rstrip())
    for row in cells:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def ago(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    delta = time.time() - epoch
    future = delta < 0
    delta = abs(delta)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if delta >= size or unit == "s":
            text = f"{int(delta // size)}{unit}"
            return f"in {text}" if future else f"{text} ago"
    return "-"


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    pairs = list(pairs)
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        print(f"{key + ':':<{width + 1}} {'-' if value is None else value}")
