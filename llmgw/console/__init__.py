"""`sudo llmgw`: the console on a control plane, the node's overview on a node (urwid).

The console is a client of the admin API (llmgw.control.adminclient), the
same calls `llmgw ctl` makes, so a screen and a command never disagree.
Every call runs on a worker thread: urwid's loop keeps drawing and taking
keys while a control plane takes its time to answer. The node's overview
reads the agent's own files on this machine, with no token.

dispatch.py chooses what opens; ui.py is the frame every screen lives in;
one module a screen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.console.dispatch import run
    from llmgw.console.setup import run_setup

__all__ = [
    "run", "run_setup",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing
# the package costs nothing, and one name loads only its own module.
__getattr__ = lazy_face(__name__, {
    "dispatch": ("run",),
    "setup": ("run_setup",),
})
