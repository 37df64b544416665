"""The admin API's fabric test: the link between two nodes, measured (`llmgw ctl fabric-test`).

    POST /api/v1/fabric-test   {"from": NODE, "to": NODE, "bytes": N, "pings": N}

The leader tells `to` to listen and `from` to connect, over their links to it (AgentService.fabric_test,
agent/fabric.py), and answers the round trips' latency and the bytes' rate. Only the leader has the agents,
so a standby names the leader, as the node logs do.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _json, body
from llmgw.control.adminapi.logs import _standby
from llmgw.control.adminapi.models import catalog_of, refusals

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

DEFAULT_BYTES = 256 << 20
MOST_BYTES = 16 << 30
MOST_PINGS = 1000


@refusals
async def fabric_test(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    data = await body(request)
    size, pings = data.get("bytes", DEFAULT_BYTES), data.get("pings", 20)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MOST_BYTES:
        raise Refused(400, f"bytes must be a whole number from 1 to {MOST_BYTES}", "invalid_request")
    if not isinstance(pings, int) or isinstance(pings, bool) or not 1 <= pings <= MOST_PINGS:
        raise Refused(400, f"pings must be a whole number from 1 to {MOST_PINGS}", "invalid_request")
    return _json(await measure(plane, str(data.get("from", "")), str(data.get("to", "")), size, pings))


async def measure(plane: ControlPlane, source: str, target: str, size: int, pings: int) -> dict[str, Any]:
    if not plane.lease.leading:
        raise Refused(503, _standby(plane), "not_leader")
    catalog = catalog_of(plane)
    a, b = await catalog.find_node(source), await catalog.find_node(target)
    if a.id == b.id:
        raise Refused(400, f"name two nodes: {a.name} twice measures no link", "invalid_request")
    agents = plane.cluster.agents
    for record in (a, b):
        node = agents.nodes.get(record.id)
        if node is None or not node.connected:
            raise Refused(409, f"node {record.name} is not connected: is its agent running?", "not_connected")
    result = await agents.fabric_test(a.id, b.id, size, pings)
    if result.error:
        raise Refused(502, f"{a.name} to {b.name}: {result.error}", "fabric_failed")
    rtts = sorted(result.rtt_ms)
    return {"from": a.name, "to": b.name, "address": result.address, "bytes": result.bytes,
            "seconds": result.seconds, "bytes_per_second": result.bytes / result.seconds if result.seconds else 0.0,
            "latency_ms": {"median": statistics.median(rtts), "min": rtts[0], "max": rtts[-1]} if rtts else None,
            "pings": len(rtts)}


def register(router: web.UrlDispatcher) -> None:
    router.add_post("/api/v1/fabric-test", fabric_test)
