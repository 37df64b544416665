"""The catalog: models as people add them, and where their replicas run.

    spec.py       ModelSpec and its parts, loaded from a model file and validated naming the key
    cluster.py    NodeView: a node's hardware, labels and engines, from its Register and Heartbeat
    fit.py        Need and Room: whether a replica fits on a node, and why not, in figures
    placement.py  place(): one pure pass from catalog and cluster to a Plan
    plan.py       the Plan's actions: Start, Stop, Lost, Wait, Purge, Forget
    explain.py    explain(): every node considered for a model and why each was refused
    changes.py    the administrator's changes (scale, resources, context, gpus, serve) and their refusals
    service.py    Catalog: those changes over the store, each audited

The reconciler (llmgw.control.reconciler, leader only) runs `place` and
carries out its plan; the admin API and `llmgw ctl` use `Catalog`.
"""

from llmgw.control.catalog.cluster import GPUView, NodeView, gpu_class
from llmgw.control.catalog.explain import Explanation, NodeVerdict, explain
from llmgw.control.catalog.placement import Demand, Entry, Policy, node_lost, place
from llmgw.control.catalog.plan import Action, Forget, Lost, Plan, Purge, Start, Stop, Wait
from llmgw.control.catalog.spec import (
    GPUNeed,
    ModelSpec,
    OnDemand,
    Profile,
    Scaling,
    SpecError,
    load_spec,
    parse_spec_text,
)

__all__ = [
    "ModelSpec", "Profile", "GPUNeed", "Scaling", "OnDemand", "SpecError", "load_spec", "parse_spec_text",
    "NodeView", "GPUView", "gpu_class",
    "place", "Entry", "Demand", "Policy", "node_lost",
    "Plan", "Action", "Start", "Stop", "Lost", "Wait", "Purge", "Forget",
    "explain", "Explanation", "NodeVerdict",
]
