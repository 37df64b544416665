"""The agent's own recent log, kept in memory for `llmgw ctl logs NODE` without --source.

The agent logs to stderr, which systemd keeps in the journal, but reading
the journal takes a shell on the node. What an administrator wants when a
node misbehaves (a download that failed, an engine it could not start, a
control plane it cannot reach) is in the last lines, so the agent keeps
them in a ring as it keeps each engine's output, and the leader fetches
them over the agent's link the same way.
"""

from __future__ import annotations

import logging

from llmgw.agent.supervisor.ring import LogRing, OutputLimits
from llmgw.protocol import LogLine

LIMITS = OutputLimits(max_lines=5000, max_bytes=1 << 20, max_line_bytes=8 << 10)


class OwnLog(logging.Handler):
    """A logging handler that keeps the last lines logged, as the engines' rings keep theirs.

    Threads log too (blocking work runs on them), so the ring is read and
    written under the handler's lock; `handle()` holds it around `emit`.
    """

    def __init__(self, limits: OutputLimits = LIMITS, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.ring = LogRing(limits)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - a bad format string must not lose the agent its log
            self.handleError(record)
            return
        self.ring.feed(text.encode("utf-8", errors="replace") + b"\n", at=record.created)

    def lines(self, n: int) -> list[LogLine]:
        self.acquire()  # the handler's own lock, which handle() holds around emit
        try:
            return [LogLine(line.at, line.text, "agent") for line in self.ring.lines(n)]
        finally:
            self.release()

    def attach(self, logger: logging.Logger | None = None) -> OwnLog:
        (logger or logging.getLogger()).addHandler(self)
        return self

    def detach(self, logger: logging.Logger | None = None) -> None:
        (logger or logging.getLogger()).removeHandler(self)
