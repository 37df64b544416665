"""The agent's connection to the cluster: dial a control plane, register, heartbeat, and act on what it says.

The agent knows the control planes from agent.yaml and, once connected,
from the list the leader last sent (Welcome.control_planes); it tries them
in turn. A standby answers NotLeader naming the leader, which is dialled
next. When the link is lost — closed, or silent past the ping rule — the
agent dials the next one it knows at once, then backs off up to a few
seconds while none answers. The engines keep running through all of it:
losing the control plane is no reason to stop serving.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp

from llmgw import __version__
from llmgw.agent import fabric
from llmgw.connecterror import connect_failure
from llmgw.protocol import (
    GPU,
    CachedBlocks,
    Error,
    FabricResult,
    FabricTest,
    Heartbeat,
    Host,
    Link,
    LinkLost,
    LogsRequest,
    NodeLogs,
    NotLeader,
    Provision,
    Register,
    RemoveWeights,
    ShardLoad,
    ShardStatus,
    StartShard,
    StopShard,
    Storage,
    Upgrade,
    Welcome,
)
from llmgw.trust import control_plane_named

log = logging.getLogger("llmgw.agent")

WELCOME_WITHIN = 10.0
BACKOFF_MAX = 5.0


class Shards(Protocol):
    """What runs on this node: the agent's shard runner (weights, engines, supervisor)."""

    updates: asyncio.Queue  # ShardStatus, as states and downloads move

    def statuses(self) -> list[ShardStatus]: ...
    def loads(self) -> list[ShardLoad]: ...
    async def start(self, message: StartShard) -> None: ...  # idempotent by shard_id
    async def stop(self, message: StopShard) -> None: ...
    async def remove_weights(self, message: RemoveWeights) -> None: ...
    async def logs(self, message: LogsRequest) -> NodeLogs: ...
    def engines(self) -> dict[str, str]: ...


class CachedSource(Protocol):
    """Each replica's cached blocks as they change (agent/kvfeed.py)."""

    def resend(self) -> None: ...
    def pause(self) -> None: ...
    async def take(self) -> list[CachedBlocks]: ...


class Hardware(Protocol):
    def describe(self) -> tuple[Host, list[GPU], list[Storage]]: ...
    def sample(self) -> Heartbeat: ...


class ClusterLink:
    def __init__(self, *, node_id: str, name: str, control_planes: list[str], ssl: ssl_module.SSLContext | None,
                 hardware: Hardware, shards: Shards, labels: dict[str, str] | None = None, advertise: str = "",
                 on_welcome: Callable[[Welcome], None] | None = None,
                 on_upgrade: Callable[[Upgrade], Awaitable[str | None]] | None = None,
                 cached: CachedSource | None = None) -> None:
        self.node_id, self.name = node_id, name
        self.known = list(dict.fromkeys(control_planes))
        self.ssl = ssl
        self.hardware, self.shards = hardware, shards
        self.labels = labels or {}
        self.advertise = advertise
        self.on_welcome = on_welcome
        self.on_upgrade = on_upgrade  # None, or why this node cannot upgrade itself
        self.cached = cached  # each replica's cached blocks, for a leader that takes them
        self._fabric_tasks: set[asyncio.Task[None]] = set()
        self.leader = ""  # the control plane this agent is connected to, "" while none
        self.connected = asyncio.Event()
        self._next: str | None = None  # a leader a standby named: dialled first

    def _scheme(self) -> str:
        return "wss" if self.ssl is not None else "ws"

    async def run(self) -> None:
        """Keep a link to the leader until cancelled."""
        backoff = 0.25
        async with aiohttp.ClientSession() as session:
            while True:
                order = self._order()
                if not order:
                    raise RuntimeError("no control plane to dial: agent.yaml's control_planes is empty; "
                                       "run `llmgw join CODE` on this node")
                answered = False
                for address in order:
                    try:
                        answered = await self._session(session, address) or answered
                    except (TimeoutError, LinkLost, OSError, aiohttp.ClientError) as e:
                        log.info("control plane %s: %s", address, _why(e))
                    if self._next:
                        break  # a standby named the leader: dial it now
                if self._next:
                    continue
                if answered:
                    backoff = 0.25
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)

    def _order(self) -> list[str]:
        first = [self._next] if self._next else []
        self._next = None
        return list(dict.fromkeys(first + self.known))

    async def _session(self, session: aiohttp.ClientSession, address: str) -> bool:
        """One connection; True when a control plane answered (welcomed or named the leader)."""
        url = f"{self._scheme()}://{address}/agent"
        async with session.ws_connect(url, ssl=self.ssl if self.ssl is not None else False, autoping=False,
                                      timeout=aiohttp.ClientWSTimeout(ws_close=3.0),
                                      max_msg_size=4 << 20) as ws:
            if self.ssl is not None and control_plane_named(ws.get_extra_info("peercert")) is None:
                # Signed by the cluster CA, but not a control plane's (a mirror's serves too): told nothing.
                raise LinkLost("it showed a certificate from the cluster's CA that is not a control plane's; check "
                               "that this address is a control plane's agent port and not a model mirror's")
            link = Link(ws, peer=f"control plane {address}")
            host, gpus, storage = self.hardware.describe()
            await link.send(Register(self.node_id, self.name, __version__, host=host, gpus=gpus, storage=storage,
                                     engines=self.shards.engines(), labels=self.labels,
                                     shards=self.shards.statuses(), advertise=self.advertise))
            messages = link.messages()
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that comes as the welcome does (a SIGTERM
                # just as the agent connects), and the agent then ran on connected, deaf to its stop, until
                # killed (1 in 40 stops under load, 2026-12-08). asyncio.timeout passes the cancel on.
                async with asyncio.timeout(WELCOME_WITHIN):
                    first = await anext(messages)
            except StopAsyncIteration:
                raise LinkLost(link.closed_because or "closed before answering") from None
            if isinstance(first, NotLeader):
                if first.control_planes:
                    self.known = list(dict.fromkeys(self.known + first.control_planes))
                if first.leader and first.leader != address:
                    log.info("control plane %s is a standby; the leader is %s", address, first.leader)
                    self._next = first.leader
                else:
                    log.info("control plane %s is a standby and knows no leader yet", address)
                return True
            if isinstance(first, Error):
                raise LinkLost(f"refused: {first.message}")
            if not isinstance(first, Welcome):
                raise LinkLost(f"answered {type(first).__name__} instead of welcome")
            # Those it named first, then the rest: a control plane added later is known from here on.
            self.known = list(dict.fromkeys(first.control_planes + self.known)) if first.control_planes else self.known
            self.leader = address
            self.connected.set()
            if self.on_welcome is not None:
                self.on_welcome(first)
            log.info("connected to the leader %s", address)
            tasks = [asyncio.create_task(self._heartbeats(link, first.heartbeat_s)),
                     asyncio.create_task(self._updates(link))]
            if first.cached_blocks and self.cached is not None:
                self.cached.resend()  # a new leader knows none of them
                tasks.append(asyncio.create_task(self._cached(link, self.cached)))
            try:
                async for message in messages:
                    await self._act(link, message)
                raise LinkLost(link.closed_because or "the control plane closed the connection")
            finally:
                self.leader = ""
                self.connected.clear()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _heartbeats(self, link: Link, every: float) -> None:
        while True:
            beat = await asyncio.to_thread(self.hardware.sample)
            beat.at = time.time()
            beat.shards = self.shards.loads()
            await link.send(beat)
            await asyncio.sleep(max(0.5, every))

    async def _updates(self, link: Link) -> None:
        queue = self.shards.updates
        while True:
            status = await queue.get()
            try:
                await link.send(status)
            except LinkLost:
                # Sent again, with every shard's state, in the next Register.
                return

    @staticmethod
    async def _cached(link: Link, cached: CachedSource) -> None:
        try:
            while True:
                for message in await cached.take():
                    await link.send(message)
        finally:
            cached.pause()

    async def _answer_fabric(self, link: Link, message: FabricTest) -> None:
        """One side of `llmgw ctl fabric-test` (agent/fabric.py): listening where this node is reached, or probing."""
        if message.role == "probe":
            answer = await fabric.probe(message)
        else:
            try:
                answer, serving = await fabric.serve(message, self.advertise or "127.0.0.1")
                self._aside(serving)
            except OSError as e:
                answer = FabricResult(message.request_id, error=f"could not listen on {self.advertise}: {e}")
        try:
            await link.send(answer)
        except LinkLost:
            pass  # the leader that asked is gone; its test with it

    def _aside(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._fabric_tasks.add(task)  # held until it ends: the loop keeps only a weak reference
        task.add_done_callback(self._fabric_tasks.discard)

    async def _act(self, link: Link, message: Any) -> None:
        if isinstance(message, StartShard):
            await self.shards.start(message)
        elif isinstance(message, StopShard):
            await self.shards.stop(message)
        elif isinstance(message, RemoveWeights):
            await self.shards.remove_weights(message)
        elif isinstance(message, LogsRequest):
            await link.send(await self.shards.logs(message))
        elif isinstance(message, FabricTest):
            # Aside: a probe takes as long as its bytes do, and the leader's other messages must not wait on it.
            self._aside(self._answer_fabric(link, message))
        elif isinstance(message, Provision):
            log.info("provision: %s", ", ".join(f"{k} {v}" for k, v in message.engines.items()) or "nothing")
        elif isinstance(message, Upgrade):
            refusal = ("this agent does not upgrade itself" if self.on_upgrade is None
                       else await self.on_upgrade(message))
            if refusal:
                log.warning("not upgraded to %s: %s", message.version, refusal)
                await link.send(Error(refusal, "upgrade"))
        elif isinstance(message, Error):
            log.warning("the control plane says: %s (%s)", message.message, message.about or "-")
        else:
            await link.send(Error(f"an agent does not act on {type(message).__name__}", type(message).__name__))


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "did not answer in time"
    if isinstance(e, aiohttp.WSServerHandshakeError):
        return f"refused the connection ({e.status} {e.message})"
    if isinstance(e, aiohttp.ClientConnectorError):
        return connect_failure(e)
    return str(e) or type(e).__name__
