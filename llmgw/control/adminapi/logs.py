"""The admin API's node logs: what `llmgw ctl logs NODE [--source SHARD]` shows.

    GET /api/v1/nodes/{node}/logs?source=SHARD&lines=N

The lines are not in the store: the leader asks the node over its agent
WebSocket (AgentService.logs), and the agent answers from the bounded ring
it keeps of each engine's output, or of its own log when no source is
given. Only the leader has the agents connected, so a standby says which
control plane to ask instead of answering that no node is connected.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llmgw.control.adminapi import PLANE, Refused, _json
from llmgw.control.adminapi.models import catalog_of, refusals
from llmgw.protocol import ShardStatus, to_dict

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

MAX_LINES = 5000  # an engine's ring keeps at most 2,000 lines and 1 MiB; the agent's own, as many
DEFAULT_LINES = 200


def _lines(request: web.Request) -> int:
    given = request.query.get("lines", "")
    try:
        lines = int(given) if given else DEFAULT_LINES
    except ValueError:
        lines = 0
    if not 1 <= lines <= MAX_LINES:
        raise Refused(400, f"lines must be a whole number from 1 to {MAX_LINES}, not {given}", "invalid_request")
    return lines


def _standby(plane: ControlPlane) -> str:
    lease = plane.lease.state.lease
    if lease is None or lease.expires_at < time.time():
        where = "no control plane leads just now; try again in a few seconds"
    else:
        name = lease.holder.rsplit("#", 1)[0]
        where = f"the leader is {name} ({lease.address}); run this there"
    return f"this control plane ({plane.name}) stands by and the nodes are connected to the leader only: {where}"


@refusals
async def node_logs(request: web.Request) -> web.Response:
    plane: ControlPlane = request.app[PLANE]
    lines = _lines(request)
    return _json(await node_logs_of(plane, request.match_info["node"], request.query.get("source", "").strip(),
                                    lines))


async def node_logs_of(plane: ControlPlane, ident: str, source: str, lines: int) -> dict[str, Any]:
    """A node's last `lines` of its agent's log, or of shard `source`'s engine, asked of the node now.

    Refused (Refused, or the catalog's Refusal for a node there is not) with
    the sentence the admin API answers: on a standby, which control plane to
    ask; for a node not connected, when it was last heard from. The cluster's
    MCP tool `node_logs` (llmgw.mcp.cluster) calls this too.
    """
    if not plane.lease.leading:
        raise Refused(503, _standby(plane), "not_leader")
    record = await catalog_of(plane).find_node(ident)
    agents = plane.cluster.agents
    node = agents.nodes.get(record.id)
    if node is None or not node.connected:
        heard = f"; last heard from {time.time() - record.heartbeat_at:.0f} s ago" if record.heartbeat_at else ""
        raise Refused(409, f"node {record.name} is not connected{heard}: is its agent running? "
                           "(systemctl status llmgw-agent on it)", "not_connected")
    answer = await agents.logs(record.id, source, lines)
    if answer.error:
        if source and source not in node.shards:
            raise Refused(404, f"node {record.name} runs no shard {source}; {_shards(node.shards)}", "not_found")
        raise Refused(409 if source else 502, f"node {record.name}: {answer.error}", "node_refused")
    return {"node": record.name, "node_id": record.id, "source": source,
            "lines": [to_dict(line) for line in answer.lines]}


def _shards(shards: dict[str, ShardStatus]) -> str:
    if not shards:
        return "it runs none now"
    listed = ", ".join(f"{s.shard_id} ({s.model}, {s.state})" for s in sorted(shards.values(),
                                                                              key=lambda s: s.shard_id))
    return f"its shards: {listed}"


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/api/v1/nodes/{node}/logs", node_logs)
