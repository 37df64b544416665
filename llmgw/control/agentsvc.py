"""The control plane's side of the agents' WebSockets: who is connected, what they have, what they run.

Only the leader takes agents. A standby answers an agent's Register with
NotLeader naming the leader, and the agent dials it; when this control
plane stops leading it closes every agent's link, so they find the new
leader rather than report to one that no longer places work.

What the agents say is kept here in memory (the latest Register and
Heartbeat of each node, the state of each shard) and handed to the
reconciler through `changed`; nothing on this path waits on the store.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmgw.protocol import (
    MAX_MESSAGE_BYTES,
    Error,
    FabricResult,
    FabricTest,
    Heartbeat,
    Link,
    LinkLost,
    LogsRequest,
    NodeLogs,
    NotLeader,
    Register,
    ShardStatus,
    Welcome,
)

log = logging.getLogger("llmgw.agents")

REGISTER_WITHIN = 10.0  # seconds an agent has to say who it is after connecting
LOGS_WITHIN = 10.0
FABRIC_SERVE_WITHIN = 10.0


@dataclass
class Node:
    """One node as the leader knows it."""

    id: str
    register: Register
    link: Link | None = None
    heartbeat: Heartbeat | None = None
    connected_at: float = 0.0
    last_seen: float = 0.0  # monotonic: the last message of any kind
    lost_at: float | None = None  # monotonic: when its link went; None while connected
    shards: dict[str, ShardStatus] = field(default_factory=dict)
    upgrade_refusal: str = ""  # why the node said it could not upgrade itself (an Error about "upgrade")

    @property
    def name(self) -> str:
        return self.register.name

    @property
    def connected(self) -> bool:
        return self.link is not None


class AgentService:
    """The agents' WebSocket endpoint and the leader's view of the nodes.

    `leading()` says whether this control plane leads now; `leader()` the
    agent address of the one that does ("" when none); `control_planes()`
    every control plane's agent address. `peer_id(request)` is the node id
    from the client certificate the TLS layer verified (None refuses).
    """

    def __init__(self, *, address: str, leading: Callable[[], bool], leader: Callable[[], str],
                 control_planes: Callable[[], list[str]], peer_id: Callable[[web.Request], str | None],
                 heartbeat_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self._leading, self._leader, self._control_planes = leading, leader, control_planes
        self._peer_id = peer_id
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self.nodes: dict[str, Node] = {}
        self.changed = asyncio.Event()  # set on anything the reconciler should look at
        self._listeners: list[Callable[[Node, object], None]] = []
        self._logs: dict[str, asyncio.Future[NodeLogs]] = {}
        self._fabric: dict[str, asyncio.Future[FabricResult]] = {}
        self._background: set[asyncio.Future[object]] = set()

    # --- for the reconciler and the admin API ---------------------------------------------

    def spawn(self, work: Awaitable[object]) -> None:
        """Run `work` aside, holding the task until it ends: the loop keeps only a weak reference,
        and a StopShard whose task was collected midway would never reach its node."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def on_message(self, listener: Callable[[Node, object], None]) -> None:
        """Call `listener(node, message)` for each Register, Heartbeat and ShardStatus (and None when a link goes)."""
        self._listeners.append(listener)

    def connected(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.connected]

    async def send(self, node_id: str, message: Any) -> bool:
        """Send to a connected node; False when it is not connected (the reconciler tries again)."""
        node = self.nodes.get(node_id)
        if node is None or node.link is None:
            return False
        try:
            await node.link.send(message)
            return True
        except LinkLost as e:
            log.info("sending to node %s failed: %s", node.name, e)
            return False

    async def logs(self, node_id: str, source: str = "", lines: int = 200) -> NodeLogs:
        request_id = secrets.token_hex(8)
        future: asyncio.Future[NodeLogs] = asyncio.get_running_loop().create_future()
        self._logs[request_id] = future
        try:
            if not await self.send(node_id, LogsRequest(request_id, source, lines)):
                return NodeLogs(request_id, source, error="the node is not connected")
            return await asyncio.wait_for(future, LOGS_WITHIN)
        except TimeoutError:
            return NodeLogs(request_id, source, error=f"the node did not send its logs within {LOGS_WITHIN:g} s")
        finally:
            self._logs.pop(request_id, None)

    async def fabric_test(self, probing: str, serving: str, size: int, pings: int = 20) -> FabricResult:
        """`llmgw ctl fabric-test`: `serving` listens, `probing` times the round trips and `size` bytes from it
        (agent/fabric.py); the probe's result, or one whose error says which side failed."""
        token = secrets.token_urlsafe(24)
        served = await self._ask(serving, FabricTest(secrets.token_hex(8), "serve", token), FABRIC_SERVE_WITHIN)
        if served.error:
            return FabricResult(served.request_id, error=f"the serving node: {served.error}")
        # Long enough for the bytes at 10 MB/s, the slowest link a pipeline would be offered over.
        within = FABRIC_SERVE_WITHIN + pings + size / 10e6
        probed = await self._ask(probing, FabricTest(secrets.token_hex(8), "probe", token, served.address, size,
                                                     pings), within)
        probed.address = served.address
        return probed

    async def _ask(self, node_id: str, message: FabricTest, within: float) -> FabricResult:
        future: asyncio.Future[FabricResult] = asyncio.get_running_loop().create_future()
        self._fabric[message.request_id] = future
        try:
            if not await self.send(node_id, message):
                return FabricResult(message.request_id, error="it is not connected")
            return await asyncio.wait_for(future, within)
        except TimeoutError:
            return FabricResult(message.request_id, error=f"no answer within {within:.0f} s (an agent older than "
                                                          "this control plane does not take the test)")
        finally:
            self._fabric.pop(message.request_id, None)

    async def drop_all(self, why: str) -> None:
        """Close every agent's link (leadership lost): they dial again and find the leader."""
        for node in list(self.nodes.values()):
            if node.link is not None:
                await node.link.close(why)

    # --- the WebSocket ---------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        node_id = self._peer_id(request)
        if node_id is None:
            return web.json_response({"error": {"message": "agents connect with the cluster certificate "
                                                           "`llmgw join` gave them", "code": "forbidden"}},
                                     status=403)
        ws = web.WebSocketResponse(autoping=False, max_msg_size=MAX_MESSAGE_BYTES)
        await ws.prepare(request)
        link = Link(ws, peer=f"node {node_id}")
        try:
            await self._serve(node_id, link)
        except LinkLost as e:
            log.info("lost node %s: %s", node_id, e)
        finally:
            await link.close()
        return ws

    async def _serve(self, node_id: str, link: Link) -> None:
        messages = link.messages()
        try:
            first = await asyncio.wait_for(anext(messages), REGISTER_WITHIN)
        except (TimeoutError, StopAsyncIteration):
            await link.close(f"no Register within {REGISTER_WITHIN:g} s")
            return
        if not isinstance(first, Register):
            await link.send(Error("the first message must be register", type(first).__name__))
            return
        if not self._leading():
            await link.send(NotLeader(self._leader(), self._control_planes()))
            return
        if first.node_id != node_id:
            await link.send(Error(f"this certificate is node {node_id}'s, not {first.node_id}'s", "register"))
            return
        node = self._registered(node_id, first, link)
        await link.send(Welcome(node_id, self.address, self._control_planes(), self.heartbeat_s, cached_blocks=True))
        log.info("node %s (%s) connected: %d GPU(s), %d shard(s) running", node.name, node_id,
                 len(first.gpus), len(first.shards))
        try:
            async for message in messages:
                node.last_seen = self._clock()
                if isinstance(message, Heartbeat):
                    node.heartbeat = message
                elif isinstance(message, ShardStatus):
                    node.shards[message.shard_id] = message
                    self.changed.set()
                elif isinstance(message, NodeLogs):
                    future = self._logs.get(message.request_id)
                    if future is not None and not future.done():
                        future.set_result(message)
                    continue
                elif isinstance(message, FabricResult):
                    answered = self._fabric.get(message.request_id)
                    if answered is not None and not answered.done():
                        answered.set_result(message)
                    continue
                elif isinstance(message, Error):
                    if message.about == "upgrade":
                        node.upgrade_refusal = message.message
                    log.warning("node %s says: %s (%s)", node.name, message.message, message.about or "-")
                    continue
                elif isinstance(message, Register):
                    await link.send(Error("register is sent once, first", "register"))
                    continue
                self._tell(node, message)
        finally:
            if node.link is link:
                node.link = None
                node.lost_at = self._clock()
                log.warning("node %s (%s) disconnected%s", node.name, node_id,
                            f": {link.closed_because}" if link.closed_because else "")
                self._tell(node, None)
                self.changed.set()

    def _registered(self, node_id: str, register: Register, link: Link) -> Node:
        now = self._clock()
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = Node(node_id, register)
        elif node.link is not None and node.link is not link:
            # The same node again: its old connection is dead and the new one wins.
            self.spawn(node.link.close("the node connected again"))
        node.register, node.link, node.connected_at, node.last_seen, node.lost_at = register, link, now, now, None
        # What it runs now is the truth: an agent that restarted adopted these.
        node.shards = {s.shard_id: s for s in register.shards}
        self._tell(node, register)
        self.changed.set()
        return node

    def _tell(self, node: Node, message: object) -> None:
        for listener in self._listeners:
            try:
                listener(node, message)
            except Exception:  # one listener's bug must not drop the node
                log.exception("a listener of node %s's messages failed", node.name)
