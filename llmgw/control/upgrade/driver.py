"""The leader's drive of the cluster's upgrade: one machine (or one wave of nodes) at a time, each checked.

Every DRIVE_EVERY the leader reads the upgrade record; while it is running
it acts on the first wave not yet through and writes what happened back,
compared and set by revision. A control plane is told over the mTLS port
(POST /upgrade/self) and is through when it answers /whoami on the new
version; the leader upgrades itself last, and the control plane that leads
next carries on. A node is told over its agent link (Upgrade) and is
through when it has registered on the new version with as many ready
shards as before. The first machine not through within its bound stops the
upgrade, with a sentence saying how far it got and what to do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from llmgw.control.upgrade.plan import (
    CONTROL_PLANE,
    DOING,
    DONE,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STOPPED,
    UNCHANGED,
    current_wave,
    where_it_stands,
)
from llmgw.protocol import Upgrade
from llmgw.store import Conflict, StoreError

if TYPE_CHECKING:
    from llmgw.control.plane import ControlPlane

log = logging.getLogger("llmgw.upgrade")

DRIVE_EVERY = 1.0
UP_WITHIN = 120.0  # the default bound: a machine back on the new version within this, or the upgrade stops
ASK_TIMEOUT = 10.0
# A node's agent finds a new leader by itself, its tries backing off: after the control planes' own waves (the
# leader restarted, perhaps another leading now) it may take some seconds to be back. Seen in CI under load: the
# node wave began before the first node had found the restarted leader, and the whole upgrade stopped there.
RECONNECT_WITHIN = 60.0


def bounds(doc: dict[str, Any]) -> tuple[float, float, float]:
    """(up, confirm, back) for this upgrade: back on the new version within `up`; the machine's own watchdog
    puts the old program back after `confirm`, shorter, so it has when the upgrade looks; after a failure,
    `back` more to see the machine serve on its old version. A node's ready shards get `up` more again."""
    up = float(doc.get("up_within") or UP_WITHIN)
    return up, up / 2, up


class Upgrader:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="upgrade-driver")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), DRIVE_EVERY)
            except TimeoutError:
                pass
            self.wake.clear()
            if not self.plane.lease.leading or self.plane.stop_requested.is_set():
                continue
            try:
                await self.step()
            except (StoreError, Conflict) as e:
                log.info("upgrade: %s; read again in %g s", e, DRIVE_EVERY)
            except Exception:  # the drive must outlive one bad round
                log.exception("upgrade: a round failed")

    async def step(self) -> None:
        record = await self.plane.store.get_upgrade()
        if record is None or record.doc.get("state") != RUNNING:
            return
        doc = record.doc
        wave = current_wave(doc)
        if not wave:
            doc["state"] = FINISHED
            doc["sentence"] = (f"every machine is on {doc['to']}" if not doc["rollback"]
                               else "every machine the upgrade touched is back on the version it ran before")
            await self._put(doc, record.revision)
            log.info("upgrade: %s", doc["sentence"])
            return
        if wave[0]["kind"] == CONTROL_PLANE:
            await self._control_plane(doc, wave[0])
        else:
            await self._nodes(doc, wave)
        failed = [m for m in wave if m["state"] == FAILED]
        if failed:
            doc["state"] = STOPPED
            doc["sentence"] = (" ".join(m["sentence"] for m in failed) + f" Where it stands: {where_it_stands(doc)}. "
                               "`llmgw ctl logs NODE` or the control plane's log says why; fix it and run "
                               "`llmgw upgrade --resume`, or put the upgraded machines back with "
                               "`llmgw upgrade --rollback`.")
            log.warning("upgrade stopped: %s", doc["sentence"])
        await self._put(doc, record.revision)

    async def _put(self, doc: dict[str, Any], revision: int) -> None:
        await self.plane.store.put_upgrade(doc, revision, time.time())

    def _sha256(self, doc: dict[str, Any], version: str) -> str:
        return str(doc.get("sha256_of", {}).get(version) or doc["sha256"])

    # --- control planes ---------------------------------------------------------------------

    async def _control_plane(self, doc: dict[str, Any], m: dict[str, Any]) -> None:
        now = time.time()
        up, confirm_within, back_within = bounds(doc)
        if m["state"] == PENDING:
            if m["name"] == self.plane.name:
                others = [o for o in doc["machines"]
                          if o["kind"] == CONTROL_PLANE and o is not m and o["state"] == PENDING]
                if others:
                    # Leadership moved here before this one's turn: the leader goes last, so the others first.
                    others[0]["wave"], m["wave"] = m["wave"], others[0]["wave"]
                    return
            said = await self._whoami(m["address"])
            if said == m["to"]:
                m["state"], m["done_at"] = DONE, time.time()
                return
            answer, why = await self._tell(m, confirm_within)
            if answer is None:
                m["state"], m["sentence"] = FAILED, f"Control plane {m['name']} was not upgraded: {why}."
                return
            m["state"], m["since"] = DOING, now
            log.info("upgrade: control plane %s told to upgrade to %s", m["name"], m["to"])
            return
        # DOING: back on the new version?
        said = await self._whoami(m["address"])
        if said == m["to"]:
            m["state"], m["sentence"], m["done_at"] = DONE, "", time.time()
            log.info("upgrade: control plane %s is on %s", m["name"], m["to"])
        elif now - m["since"] > up:
            back = await self._back(m["address"], m["from"], back_within)
            m["state"] = FAILED
            m["sentence"] = (f"Control plane {m['name']} did not come back on {m['to']} within {up:g} s; "
                             + ("its watchdog put " + m["from"] + " back and it serves again." if back else
                                "it does not answer yet, on either version."))

    async def _tell(self, m: dict[str, Any], confirm_within: float) -> tuple[dict[str, Any] | None, str]:
        body: dict[str, Any] = {"version": m["to"], "sha256": "", "from": self.plane.trust.agent_address,
                                "confirm_within_s": confirm_within, "wheels": self.plane.upgrades.releases.wheels()}
        record = await self.plane.store.get_upgrade()
        if record is not None:
            body["sha256"] = self._sha256(record.doc, m["to"])
        context = self.plane.exchange.client_context()
        if context is None:
            return None, "this control plane has no cluster certificate to reach it with"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session, \
                    session.post(f"https://{m['address']}/upgrade/self", json=body, ssl=context) as r:
                answer = await r.json(content_type=None)
                if r.status >= 400:
                    return None, str((answer or {}).get("error", {}).get("message") or f"it answered {r.status}")
                return answer, ""
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            return None, f"it could not be reached at {m['address']} ({e or type(e).__name__})"

    async def _whoami(self, address: str) -> str:
        """The version the control plane at `address` runs, "" when it does not answer."""
        context = self.plane.exchange.client_context()
        if context is None:
            return ""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT)) as session, \
                    session.get(f"https://{address}/whoami", ssl=context) as r:
                if r.status != 200:
                    return ""
                return str((await r.json(content_type=None)).get("version") or "")
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError, AttributeError):
            return ""

    async def _back(self, address: str, version: str, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await self._whoami(address) == version:
                return True
            await asyncio.sleep(1.0)
        return False

    # --- nodes ------------------------------------------------------------------------------

    async def _reconnected(self, node_id: str, within: float) -> Any:
        """The node once its agent is connected to this control plane again, or None after `within` seconds."""
        agents = self.plane.cluster.agents
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            node = agents.nodes.get(node_id)
            if node is not None and node.connected:
                return node
            await asyncio.sleep(0.5)
        return agents.nodes.get(node_id)

    async def _nodes(self, doc: dict[str, Any], wave: list[dict[str, Any]]) -> None:
        agents = self.plane.cluster.agents
        now = time.time()
        up, confirm_within, back_within = bounds(doc)
        for m in wave:
            node = agents.nodes.get(m["id"])
            if m["state"] == PENDING and (node is None or not node.connected):
                node = await self._reconnected(m["id"], RECONNECT_WITHIN)
            if m["state"] == PENDING:
                if node is None or not node.connected:
                    m["state"], m["sentence"] = FAILED, f"Node {m['name']} is not connected, so it was not upgraded."
                    continue
                if node.register.version == m["to"]:
                    m["state"] = UNCHANGED
                    continue
                m["ready_before"] = _ready(node)
                node.upgrade_refusal = ""
                order = Upgrade(m["to"], self._sha256(doc, m["to"]), confirm_within,
                                self.plane.upgrades.releases.wheels())
                told = await agents.send(m["id"], order)
                if not told:
                    # Its link dropped as it was told (CI under load: a missed ping); once it is back, again.
                    again = await self._reconnected(m["id"], RECONNECT_WITHIN)
                    told = again is not None and again.connected and await agents.send(m["id"], order)
                if not told:
                    m["state"], m["sentence"] = FAILED, f"Node {m['name']} could not be told to upgrade."
                    continue
                m["state"], m["since"] = DOING, now
                log.info("upgrade: node %s told to upgrade to %s (%d ready shard(s))", m["name"], m["to"],
                         m["ready_before"])
            elif m["state"] == DOING:
                if node is not None and node.upgrade_refusal:
                    m["state"] = FAILED
                    m["sentence"] = f"Node {m['name']} was not upgraded: {node.upgrade_refusal}."
                elif node is not None and node.connected and node.register.version == m["to"]:
                    if _ready(node) >= m["ready_before"]:
                        m["state"], m["sentence"], m["done_at"] = DONE, "", time.time()
                        log.info("upgrade: node %s is on %s", m["name"], m["to"])
                    elif now - m["since"] > 2 * up:
                        m["state"] = FAILED
                        m["sentence"] = (f"Node {m['name']} is on {m['to']} but has {_ready(node)} ready shard(s) "
                                         f"of the {m['ready_before']} it had.")
                elif now - m["since"] > up:
                    back = node is not None and node.connected and node.register.version == m["from"]
                    if back or now - m["since"] > up + back_within:
                        m["state"] = FAILED
                        m["sentence"] = (f"Node {m['name']} did not come back on {m['to']} within {up:g} s"
                                         + (f"; its watchdog put {m['from']} back and it is connected again."
                                            if back else "; it is not connected on either version."))


def _ready(node: Any) -> int:
    return sum(1 for s in node.shards.values() if s.state == "ready")
