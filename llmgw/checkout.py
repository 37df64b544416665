"""The checkout a command is run inside: its var/, found walking up from the working directory.

`python3 build.py run` keeps the server's data (var/admin-token) and the
node's (var/node/agent.yaml) in the checkout's var/. A person who has cd'd
into llmgw/router still means that server and that node, so `llmgw ctl` and
`llmgw doctor` look in the working directory, then in each folder above it,
as git finds its .git (issue 11, items 6 and 7). Only a var/ holding one of
those files counts: /var, met on the way to /, is the system's, not a
checkout's.
"""

from __future__ import annotations

import os
from pathlib import Path

ADMIN_TOKEN = "admin-token"  # noqa: S105 - the file's name in var/, not a token
AGENT_CONFIG = os.path.join("node", "agent.yaml")


def find_var(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The nearest checkout's var/ at or above `start` (default the working directory), None outside one."""
    try:
        here = Path(start if start is not None else os.getcwd()).absolute()
    except FileNotFoundError:  # the working directory was removed under us
        return None
    for folder in (here, *here.parents):
        var = folder / "var"
        if (var / ADMIN_TOKEN).is_file() or (var / AGENT_CONFIG).is_file():
            return var
    return None


def checkout_file(name: str, start: str | os.PathLike[str] | None = None) -> str | None:
    """`name` inside the nearest checkout's var/ when it is there, else None."""
    var = find_var(start)
    if var is None:
        return None
    path = var / name
    return str(path) if path.is_file() else None
