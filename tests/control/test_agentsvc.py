"""Agents and control planes over real WebSockets on loopback: register, heartbeat, a standby naming the leader,
a silent link found out by the ping rule.

The node's identity comes from its client certificate in production
(llmgw.trust); here each test server names the node it expects,
so these tests are about the conversation, not the TLS.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from llmgw.agent.link import ClusterLink
from llmgw.control.agentsvc import AgentService
from llmgw.protocol import (
    Heartbeat,
    Host,
    LogsRequest,
    NodeLogs,
    ShardLoad,
    ShardStatus,
    StartShard,
)


class Hardware:
    def describe(self):
        return Host("node-a", cpu_cores=2, memory_mb=4096), [], []

    def sample(self):
        return Heartbeat(0.0, cpu_percent=3.5)


class Shards:
    """What a node runs, kept in a dict: the seam's smallest real implementation."""

    def __init__(self, running: list[ShardStatus] = ()):
        self.updates: asyncio.Queue = asyncio.Queue()
        self.running = {s.shard_id: s for s in running}
        self.started: list[StartShard] = []

    def statuses(self):
        return list(self.running.values())

    def loads(self):
        return [ShardLoad(s) for s in self.running]

    def engines(self):
        return {"sim": "1"}

    async def start(self, message):
        self.started.append(message)
        status = ShardStatus(message.shard_id, "ready", message.profile.model, url="http://127.0.0.1:1/v1")
        self.running[message.shard_id] = status
        await self.updates.put(status)

    async def stop(self, message):
        self.running.pop(message.shard_id, None)

    async def remove_weights(self, message):
        pass

    async def logs(self, message):
        return NodeLogs(message.request_id, message.source, [])


class Plane:
    """A control plane's agent port: an aiohttp server with the AgentService on /agent."""

    def __init__(self, leading: bool, leader: str = "", quiet: float | None = None):
        self.leading = leading
        self.leader = leader
        self.service: AgentService | None = None
        self.runner: web.AppRunner | None = None
        self.address = ""

    async def start(self, peers: list[str]) -> Plane:
        app = web.Application()
        async def agent(request):
            return await self.service.handle(request)

        app.router.add_get("/agent", agent)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.address = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.service = AgentService(address=self.address, leading=lambda: self.leading,
                                    leader=lambda: self.leader, control_planes=lambda: peers + [self.address],
                                    peer_id=lambda request: "node-1")
        return self

    async def stop(self):
        await self.runner.cleanup()


@pytest.fixture
async def planes():
    made: list[Plane] = []

    async def make(leading: bool, leader: str = "") -> Plane:
        plane = await Plane(leading, leader).start([])
        made.append(plane)
        return plane
    yield make
    for plane in made:
        await plane.stop()


async def _until(predicate, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "it did not happen in time"
        await asyncio.sleep(0.02)


def _agent(addresses: list[str], shards: Shards | None = None) -> ClusterLink:
    return ClusterLink(node_id="node-1", name="node-a", control_planes=addresses, ssl=None,
                       hardware=Hardware(), shards=shards or Shards())


async def test_an_agent_registers_with_the_leader_and_its_heartbeats_arrive(planes):
    leader = await planes(leading=True)
    agent = _agent([leader.address])
    task = asyncio.create_task(agent.run())
    try:
        await _until(lambda: "node-1" in leader.service.nodes and leader.service.nodes["node-1"].heartbeat)
        node = leader.service.nodes["node-1"]
        assert node.connected and node.register.host.memory_mb == 4096 and node.register.engines == {"sim": "1"}
        assert node.heartbeat.cpu_percent == 3.5 and node.heartbeat.at > 0
        assert agent.leader == leader.address
    finally:
        task.cancel()


async def test_a_standby_names_the_leader_and_the_agent_dials_it(planes):
    leader = await planes(leading=True)
    standby = await planes(leading=False, leader=leader.address)
    agent = _agent([standby.address])
    task = asyncio.create_task(agent.run())
    try:
        await _until(lambda: agent.leader == leader.address)
        assert "node-1" in leader.service.nodes and "node-1" not in standby.service.nodes
        assert leader.address in agent.known
    finally:
        task.cancel()


async def test_a_shard_started_by_the_leader_reports_ready_and_a_restarted_agent_brings_its_shards(planes):
    from llmgw.protocol import EngineProfile

    leader = await planes(leading=True)
    shards = Shards()
    agent = _agent([leader.address], shards)
    task = asyncio.create_task(agent.run())
    try:
        await _until(lambda: leader.service.connected())
        assert await leader.service.send("node-1", StartShard("s1", EngineProfile("sim", "m")))
        await _until(lambda: leader.service.nodes["node-1"].shards.get("s1") is not None)
        assert leader.service.nodes["node-1"].shards["s1"].state == "ready"
        logs = await leader.service.logs("node-1", "s1")
        assert logs.error == "" and logs.source == "s1"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # A new agent process over the same engines: its Register carries them.
    await _until(lambda: not leader.service.nodes["node-1"].connected)
    again = _agent([leader.address], Shards(shards.statuses()))
    task = asyncio.create_task(again.run())
    try:
        await _until(lambda: leader.service.nodes["node-1"].connected)
        assert list(leader.service.nodes["node-1"].shards) == ["s1"]
    finally:
        task.cancel()


async def test_when_leadership_moves_the_agents_follow_to_the_new_leader(planes):
    first = await planes(leading=True)
    second = await planes(leading=False, leader=first.address)
    agent = _agent([first.address, second.address])
    task = asyncio.create_task(agent.run())
    try:
        await _until(lambda: agent.leader == first.address)
        first.leading, first.leader = False, second.address
        second.leading = True
        await first.service.drop_all("this control plane no longer leads")
        await _until(lambda: agent.leader == second.address)
        assert second.service.nodes["node-1"].connected
    finally:
        task.cancel()


async def test_a_silent_link_is_found_out_by_the_ping_rule():
    from llmgw.protocol.link import Link, LinkLost

    # A server that accepts the WebSocket and then never reads or answers anything, pings included.
    hold = asyncio.Event()

    async def frozen(request):
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        await hold.wait()
        return ws

    app = web.Application()
    app.router.add_get("/agent", frozen)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    import aiohttp

    try:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"ws://127.0.0.1:{port}/agent", autoping=False) as ws:
                link = Link(ws, peer="a frozen control plane", quiet=0.2, answer=0.2)
                with pytest.raises(LinkLost, match="did not answer a ping within 0.2 s"):
                    async for _ in link.messages():
                        pass
    finally:
        hold.set()
        await runner.cleanup()


async def test_logs_from_a_node_that_is_not_connected_say_so():
    service = AgentService(address="x", leading=lambda: True, leader=lambda: "", control_planes=lambda: [],
                           peer_id=lambda r: None)
    logs = await service.logs("nobody", "s1")
    assert logs.error == "the node is not connected" and isinstance(LogsRequest("r"), LogsRequest)
