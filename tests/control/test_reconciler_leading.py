"""A reconcile pass that loses the lead while it waits on the store acts on nothing it read."""

from __future__ import annotations

import asyncio
import logging

from llmgw.control.agentsvc import AgentService
from llmgw.control.reconciler import Reconciler
from llmgw.store import CatalogModel

SIM = [{"engine": "sim", "cpu_cores": 1, "memory": "256MB"}]


class SlowStore:
    """A catalog with one removed model, whose read waits until the test lets it answer.

    The removed model is what a pass would act on: placement forgets it,
    and the reconciler deletes its row.
    """

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.reading = asyncio.Event()
        self.deleted: list[str] = []
        self.written: list = []

    async def list_models(self, include_removed: bool = False):
        self.reading.set()
        await self.answer.wait()
        return [CatalogModel("gone", {"name": "gone", "profiles": SIM}, removed_at=1.0)]

    async def list_replicas(self):
        return []

    async def list_nodes(self):
        return []

    async def delete_model(self, name: str) -> None:
        self.deleted.append(name)

    async def put_replicas(self, replicas) -> None:
        self.written.extend(replicas)

    def __getattr__(self, name):
        async def nothing(*args, **kwargs):
            return None
        return nothing


class Registry:
    def __init__(self) -> None:
        self.filled = 0

    def set_placed(self, placed) -> None:
        self.filled += 1

    def set_notes(self, waits, loading) -> None:
        pass


async def _pass(lead_lost_while_reading: bool) -> tuple[SlowStore, Registry]:
    store, registry = SlowStore(), Registry()
    leading = {"now": True}
    agents = AgentService(address="", leading=lambda: leading["now"], leader=lambda: "",
                          control_planes=lambda: [], peer_id=lambda request: None)
    reconciler = Reconciler(store, agents, leading=lambda: leading["now"], registry=lambda: registry)
    reconciler.start()
    agents.changed.set()  # a pass at once, not after PASS_EVERY
    try:
        await asyncio.wait_for(store.reading.wait(), 5)
        if lead_lost_while_reading:
            # The lease lapsed on this control plane's clock while the store held the read.
            leading["now"] = False
        store.answer.set()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if store.deleted or reconciler.passes:
                break
    finally:
        await reconciler.stop()
    return store, registry


async def test_a_pass_that_loses_the_lead_while_the_store_is_slow_deletes_writes_and_routes_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="llmgw.reconciler"):
        store, registry = await _pass(lead_lost_while_reading=True)

    assert store.deleted == [] and store.written == [] and registry.filled == 0
    assert any("leadership ended during a reconcile pass" in r.getMessage() for r in caplog.records)


async def test_the_same_pass_still_leading_acts():
    # The other half: what the pass above left undone is what a leader does.
    store, registry = await _pass(lead_lost_while_reading=False)

    assert store.deleted == ["gone"] and registry.filled == 1
