"""An engine's recent output as lines: bounded in lines and bytes, each line bounded too.

An engine that logs a progress bar without newlines, or a tensor dump on
one line, must not hold the agent's memory: a line past `max_line_bytes`
is cut and says how much was dropped, and the ring forgets its oldest
lines past `max_lines` or `max_bytes`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from llmgw.protocol import LogLine

# The engine's stdout and stderr go to one file (see output.py), so the ring
# cannot tell them apart; "output" says so rather than guessing.
STREAM = "output"


@dataclass(frozen=True)
class OutputLimits:
    """How much of each engine's output the agent keeps."""

    max_lines: int = 2000
    max_bytes: int = 1 << 20
    max_line_bytes: int = 8 << 10
    max_file_bytes: int = 16 << 20
    """The output file is emptied once read past this: a chatty engine must not fill the data disk."""


DEFAULT_LIMITS = OutputLimits()  # frozen, so one instance serves every default


class LogRing:
    """The last lines of one engine's output."""

    def __init__(self, limits: OutputLimits):
        self.limits = limits
        self._lines: deque[LogLine] = deque()
        self._bytes = 0
        self._partial = bytearray()
        self._cut = 0  # bytes of an overlong line dropped so far
        self.dropped_lines = 0

    def feed(self, data: bytes, at: float | None = None) -> None:
        """Take bytes as the engine wrote them; whole lines enter the ring, a partial one waits."""
        at = time.time() if at is None else at
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            if nl < 0:
                self._take_partial(data[start:], at)
                return
            self._take_partial(data[start:nl], at)
            self._end_line(at)
            start = nl + 1

    def flush(self, at: float | None = None) -> None:
        """The engine ended: what it wrote without a final newline is a line too."""
        if self._partial or self._cut:
            self._end_line(time.time() if at is None else at)

    def lines(self, n: int | None = None) -> list[LogLine]:
        """The last n lines (all kept when n is None), oldest first."""
        if n is None or n >= len(self._lines):
            return list(self._lines)
        if n <= 0:
            return []
        return list(self._lines)[-n:]

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def _take_partial(self, chunk: bytes, at: float) -> None:
        room = self.limits.max_line_bytes - len(self._partial)
        if len(chunk) <= room:
            self._partial += chunk
            return
        self._partial += chunk[:max(room, 0)]
        self._cut += len(chunk) - max(room, 0)

    def _end_line(self, at: float) -> None:
        raw = bytes(self._partial)
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        text = raw.decode("utf-8", errors="replace")
        if self._cut:
            text += f" …[{self._cut} bytes cut]"
        self._partial.clear()
        self._cut = 0
        self._append(LogLine(at=at, text=text, stream=STREAM))

    def _append(self, line: LogLine) -> None:
        self._lines.append(line)
        self._bytes += _cost(line)
        while self._lines and (len(self._lines) > self.limits.max_lines or self._bytes > self.limits.max_bytes):
            old = self._lines.popleft()
            self._bytes -= _cost(old)
            self.dropped_lines += 1


def _cost(line: LogLine) -> int:
    return len(line.text.encode("utf-8", errors="replace"))
