"""Logging for the long-running commands: to stderr, which systemd keeps in the journal."""

from __future__ import annotations

import logging
import sys
import time

import orjson
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"at": round(record.created, 3), "level": record.levelname.lower(),
                 "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class _ClientFault(logging.Filter):
    """A request that is not valid HTTP, or whose body will not inflate, is the client's fault, not ours.

    aiohttp answers it with 400 itself, and logs the parser's traceback at
    ERROR: a fuzz of 30,000 requests put 80 of them in the server's log
    (issue 10), where a real bug's traceback would be lost among them. The
    line is kept as a warning with what was wrong; a handler's own failure
    still logs its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (HttpProcessingError, RequestPayloadError)):
            reason = " ".join(str(getattr(error, "message", None) or error).split())
            record.msg = f"{record.getMessage()}: the client sent what is not valid HTTP ({reason}); refused"
            record.args = None
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


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
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ClientFault) for f in server.filters):
        server.addFilter(_ClientFault())
