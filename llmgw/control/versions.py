"""Which llmgw version each machine of the cluster runs: the control planes and the nodes.

Read from the store, so every control plane answers the same: each control
plane writes its version with its agent address at start (llmgw.trust), and
the leader records each node's Register, which names the agent's version.
`llmgw ctl status` shows these, and an upgrade checks a machine against them.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from llmgw.store import CatalogStore, TrustStore


class _Store(TrustStore, CatalogStore, Protocol):
    """What machines reads: the control planes' addresses and the nodes."""


async def machines(store: _Store, leader_name: str = "") -> dict[str, list[dict[str, Any]]]:
    """{"control_planes": [{name, address, version, role}], "nodes": [{id, name, version, state}]}, by name."""
    planes = sorted(await store.list_control_planes(), key=lambda cp: cp.name)
    nodes = sorted(await store.list_nodes(), key=lambda n: (n.name, n.id))
    return {
        "control_planes": [{"name": cp.name, "address": cp.agent_address, "version": cp.version or "unknown",
                            "role": "leader" if cp.name == leader_name else "standby",
                            "started_ago_s": round(time.time() - cp.updated_at, 1)} for cp in planes],
        "nodes": [{"id": n.id, "name": n.name, "version": str(n.register.get("version") or "unknown"),
                   "state": n.state or "unknown"} for n in nodes],
    }
