"""Logging for the long-running commands: to stderr, which systemd keeps in the journal."""

from __future__ import annotations

import logging
import sys
import time

import orjson


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"at": round(record.created, 3), "level": record.levelname.lower(),
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log writes a line per request; the router keeps its own records.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
