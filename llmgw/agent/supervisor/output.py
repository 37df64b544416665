"""An engine's output goes to a file per shard, which the agent follows into the ring.

Why a file and not pipes: an engine must outlive the agent that started it
(the agent restarts, upgrades, is killed), and a pipe dies with its reader —
the engine's next write gets EPIPE or SIGPIPE, and a full pipe that nobody
reads blocks its logging thread, which stalls llama.cpp mid-request. A file
opened O_APPEND keeps taking writes whoever reads it, and an agent that
adopts the engine follows the same file, so `llmgw ctl logs` keeps working.

The file is bounded: once the follower has read past `max_file_bytes` it
empties it (O_APPEND makes the engine's next write land at the new start).
Bytes written between the last read and the truncation — a few
microseconds' worth — are lost; the ring has everything before, and a
line the gap cut ends there rather than running on into the next.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.agent.supervisor.ring import LogRing, OutputLimits

# One poll reads at most this much: an engine that wrote megabytes while the
# agent was away is skipped to its latest output rather than replayed.
_MAX_READ = 4 << 20


def open_for_engine(path: Path) -> int:
    """A new, empty output file for an engine about to start; the caller closes its copy after the fork."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o640)


class OutputFollower:
    """Reads what an engine appended to its output file since the last look."""

    def __init__(self, path: Path, ring: LogRing, limits: OutputLimits):
        self.path = path
        self.ring = ring
        self.limits = limits
        self.offset = 0

    def seed(self) -> None:
        """For an adopted engine: the end of what it wrote before, into the ring; then follow from there."""
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(0, size - self.limits.max_bytes)
                f.seek(start)
                data = f.read(size - start)
        except OSError:
            return
        if start > 0:
            # Started mid-line: that line's first part is not here.
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else b""
        self.ring.feed(data)
        self.offset = size

    def poll(self) -> int:
        """Feed new bytes to the ring; empty the file once it passed its bound. Returns the bytes read."""
        try:
            # Opened apart from the `with` so that only a missing or unreadable file is taken as nothing new.
            f = open(self.path, "rb")  # noqa: SIM115 - closed by the `with` below
        except OSError:
            return 0
        gap_before = gap_after = False  # bytes between what the ring has and what is read now are gone
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                # Emptied by someone else (a previous agent, an operator's `: > file`).
                self.offset = 0
                gap_before = True
            skipped = size - self.offset > _MAX_READ
            if skipped:
                self.offset = size - _MAX_READ
                gap_before = True
            f.seek(self.offset)
            data = f.read(size - self.offset)
            self.offset += len(data)
            if self.offset > self.limits.max_file_bytes:
                # Catch what arrived meanwhile, then empty it at once.
                more = f.read()
                data += more
                self.offset += len(more)
                try:
                    os.truncate(self.path, 0)
                except OSError:
                    pass
                else:
                    self.offset = 0
                    gap_after = True
        read = len(data)
        # A line cut by a gap ends where the gap begins, rather than running on into what follows it: a
        # test saw "line 2460after the file was emptied" when a block write's partial last line met the
        # truncation.
        if gap_before:
            self.ring.flush()
        if skipped:
            nl = data.find(b"\n")  # started mid-line: that line's first part is not here
            data = data[nl + 1:] if nl >= 0 else b""
        if data:
            self.ring.feed(data)
        if gap_after:
            self.ring.flush()
        return read
