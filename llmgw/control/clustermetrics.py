"""The cluster's state as Prometheus sees it: nodes, their GPUs' work (gpumetrics.py), replicas by model and state.

Read at scrape time from what the leader already holds (the agents'
connections, the reconciler's replicas), never from the store. A standby
holds neither and shows none of these, so a dashboard summing over every
control plane counts each node and replica once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily

from llmgw.control.agentsvc import AgentService
from llmgw.control.gpumetrics import gpu_metrics
from llmgw.control.reconciler import Reconciler


class ClusterCollector:
    def __init__(self, agents: AgentService, reconciler: Reconciler, leading: Callable[[], bool]) -> None:
        self._agents = agents
        self._reconciler = reconciler
        self._leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._leading():
            return
        nodes = GaugeMetricFamily("llmgw_nodes", "Nodes the leader knows, by state (connected or lost)",
                                  labels=["state"])
        up = GaugeMetricFamily("llmgw_node_up", "1 while a node's agent is connected to the leader",
                               labels=["node"])
        gpus = GaugeMetricFamily("llmgw_node_gpus", "GPUs a node reported", labels=["node"])
        states: Counter[str] = Counter({"connected": 0, "lost": 0})
        known = list(self._agents.nodes.values())
        for node in known:
            states["connected" if node.connected else "lost"] += 1
            up.add_metric([node.name], 1 if node.connected else 0)
            gpus.add_metric([node.name], len(node.register.gpus))
        for state, count in sorted(states.items()):
            nodes.add_metric([state], count)
        replicas = GaugeMetricFamily("llmgw_replicas", "Replicas the leader placed, by model and state "
                                     "(pending, starting, ready, parked, failed…)", labels=["model", "state"])
        placed = Counter((r.model, r.state or "pending") for r in list(self._reconciler.replicas.values()))
        for (model, state), count in sorted(placed.items()):
            replicas.add_metric([model, state], count)
        yield from (nodes, up, gpus, replicas)
        yield from gpu_metrics(known)
