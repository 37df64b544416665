"""GPU memory held by processes that are not this agent's engines: memory the control plane must not hand out.

A card's used memory, less what the agent's own engines hold, is what
somebody else (a user's notebook, another service, the driver itself)
holds. An engine is its process, anything in its process group, or any
process it started at any remove: Strata's server starts its engine in a
group of its own, and that engine holding 22 GB read as another's memory
until descendants counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmgw.agent.discovery.reader import GPUProcess
from llmgw.protocol import GPUSensor

# A chain this deep is no engine's, and a /proc read racing an exit must not loop.
MOST_GENERATIONS = 16


def stat_field(pid: int, field: int, proc: str = "/proc") -> int:
    """One of the numbers after the command in /proc/PID/stat (1 the parent, 2 the group); 0 when gone."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0
    # The command is in parentheses and may hold spaces or parentheses itself.
    fields = text[text.rfind(")") + 1:].split()
    try:
        return int(fields[field])
    except (IndexError, ValueError):
        return 0


class Ownership:
    """Whether a process belongs to one of the given engines."""

    def __init__(self, engines: Iterable[int], parent: Callable[[int], int] | None = None,
                 group: Callable[[int], int] | None = None) -> None:
        self.engines = {p for p in engines if p > 0}
        self._parent = parent or (lambda pid: stat_field(pid, 1))
        self._group = group or (lambda pid: stat_field(pid, 2))

    def owns(self, pid: int) -> bool:
        if not self.engines:
            return False
        if pid in self.engines or self._group(pid) in self.engines:
            return True
        p = pid
        for _ in range(MOST_GENERATIONS):
            p = self._parent(p)
            if p in self.engines:
                return True
            if p <= 1:
                return False
        return False


def foreign_memory(order: list[int], sensors: list[GPUSensor], processes: dict[int, list[GPUProcess]],
                   owner: Ownership) -> list[int]:
    """Per GPU index in `order`, used MB less what the engines' processes hold; [] when it cannot be known now."""
    used = {s.index: s.memory_used_mb for s in sensors}
    if not order or any(i not in used for i in order):
        return []
    out = []
    for i in order:
        ours = sum(p.memory_mb for p in processes.get(i, []) if owner.owns(p.pid))
        out.append(max(0, used[i] - ours))
    return out
