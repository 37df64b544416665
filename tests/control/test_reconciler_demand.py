"""The reconciler reads what the router's requests ask for each pass, and tells the router what it decided."""

from __future__ import annotations

from llmgw.config.server import ClusterSettings
from llmgw.control.agentsvc import AgentService
from llmgw.control.catalog import Demand
from llmgw.control.reconciler import Reconciler
from llmgw.router.registry import Registry
from llmgw.store import CatalogModel

SIM = [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]


class CatalogOnly:
    """A store with a catalog and nothing else: no nodes, no replicas."""

    def __init__(self, models: list[CatalogModel]) -> None:
        self.models = models

    async def list_models(self, include_removed: bool = False):
        return self.models

    async def list_replicas(self):
        return []

    async def list_nodes(self):
        return []

    def __getattr__(self, name):
        async def nothing(*args, **kwargs):
            return None
        return nothing


def _reconciler(demand: Demand, registry: Registry) -> Reconciler:
    store = CatalogOnly([
        CatalogModel("picture", {"name": "picture", "aliases": ["pic"], "profiles": SIM,
                                 "scaling": {"min": 0, "on_demand": {}}}),
        CatalogModel("chat", {"name": "chat", "profiles": SIM}, stopped=True),
    ])
    agents = AgentService(address="", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    return Reconciler(store, agents, leading=lambda: True, registry=lambda: registry, demand=lambda: demand)


async def test_an_on_demand_model_asked_for_is_placed_and_the_router_learns_why_it_waits():
    registry = Registry()
    registry.apply(ClusterSettings())
    demand = Demand()
    reconciler = _reconciler(demand, registry)
    await reconciler.once()
    # Not asked for: nothing to place, nothing to wait for.
    assert reconciler.waits == {} and registry.waits == {}
    picture, alias = registry.model("picture"), registry.model("pic")
    assert picture.on_demand and not picture.stopped and picture.catalog == "picture" and picture.endpoints == []
    assert alias.on_demand and alias.catalog == "picture"
    chat = registry.model("chat")
    assert chat.stopped and not chat.on_demand

    demand.asked["picture"] = 1.0
    await reconciler.once()
    assert registry.waits == {"picture": "fits on no node: there are no nodes"}
