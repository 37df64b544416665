"""What the agent logs while its control plane is away (issue 11, item 10)."""

from __future__ import annotations

import asyncio
import logging
import ssl

from llmgw.agent.link import ClusterLink
from tests.support.pgcluster import free_port


def closed_port() -> int:
    """A loopback port nothing listens on, leased so no other test starts a listener there."""
    return free_port()


async def test_a_stopped_control_plane_is_logged_as_a_refused_connection_not_an_ssl_context(caplog):
    # The agent dials with its cluster certificate's context, as after `llmgw server` stops.
    address = f"127.0.0.1:{closed_port()}"
    link = ClusterLink(node_id="n1", name="node1", control_planes=[address], ssl=ssl.create_default_context(),
                       hardware=None, shards=None)
    with caplog.at_level(logging.INFO, logger="llmgw.agent"):
        task = asyncio.create_task(link.run())
        for _ in range(100):
            if any(address in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    said = [r.getMessage() for r in caplog.records if address in r.getMessage()]
    assert said and said[0] == f"control plane {address}: cannot connect (Connection refused)"
    assert not any("SSLContext" in r.getMessage() for r in caplog.records)
