"""`llmgw agent`: a node of the cluster. It reports what the node has, fetches weights, and runs engines.

discovery/ (what the node has), weights/ (fetching and checking model files),
supervisor/ (running engines as child processes; each engine's command line
is llmgw/engines, which the control plane's catalog checks models with too),
link.py (the connection to the leader), shards.py (what a StartShard sets
going), agent.py (all of it together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.agent.agent import serve
    from llmgw.agent.discovery.doctor import examine
    from llmgw.agent.nodelock import AgentAlreadyRunning
    from llmgw.agent.statefile import AgentState, read_state, recent_warnings
    from llmgw.agent.supervisor import Supervisor
    from llmgw.agent.supervisor.records import ShardRecord, read_all
    from llmgw.agent.supervisor.users import RunAs, UserError, resolve

__all__ = [
    "AgentAlreadyRunning", "AgentState", "RunAs", "ShardRecord", "Supervisor", "UserError", "examine", "read_all",
    "read_state", "recent_warnings", "resolve", "serve",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing
# the package costs nothing, and one name loads only its own module.
__getattr__ = lazy_face(__name__, {
    "agent": ("serve",),
    "discovery.doctor": ("examine",),
    "nodelock": ("AgentAlreadyRunning",),
    "statefile": ("AgentState", "read_state", "recent_warnings"),
    "supervisor": ("Supervisor",),
    "supervisor.records": ("ShardRecord", "read_all"),
    "supervisor.users": ("RunAs", "UserError", "resolve"),
})
