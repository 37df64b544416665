"""The leader's reconciler stops when told to, whatever its agents are doing at that moment."""

from __future__ import annotations

import asyncio

from llmgw.control.agentsvc import AgentService
from llmgw.control.reconciler import Reconciler


class EmptyStore:
    """What stop() writes goes nowhere: nothing was placed."""

    async def list_replicas(self):
        return []

    def __getattr__(self, name):
        async def nothing(*args, **kwargs):
            return None
        return nothing


async def test_a_reconciler_stops_though_its_agents_stir_as_it_is_stopped():
    agents = AgentService(address="", leading=lambda: False, leader=lambda: "", control_planes=lambda: [],
                          peer_id=lambda request: None)
    reconciler = Reconciler(EmptyStore(), agents, leading=lambda: False, registry=lambda: None)
    reconciler.start()
    await asyncio.sleep(0.01)  # into its wait for something to change
    # The links dropping as a server stops set `changed` just before the
    # cancel: on Python 3.11 wait_for returned the event and dropped the cancel.
    agents.changed.set()
    await asyncio.wait_for(reconciler.stop(), 5)
    assert reconciler._task.done()
