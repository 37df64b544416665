"""A second mirror kept in step: each reads the other's list every `peer_interval` seconds.

What the peer holds and this one lacks is copied from it, over the cluster's TLS, and checked against the sum
the peer lists (and the pin, where the control planes want it). What the peer removed after this one got its
copy is removed here, even when this mirror was down at the time: the peer remembers each removal for a month
(holdings.REMOVED_KEPT_S). A removal here newer than the peer's copy keeps this mirror from copying it back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import aiohttp

from llmgw.mirror.fetching import Wanting, hub_url
from llmgw.mirror.holdings import BadKey, FileKey, check_sha256

if TYPE_CHECKING:
    from llmgw.mirror.service import Mirror

log = logging.getLogger("llmgw.mirror")


async def keep_in_step(mirror: Mirror) -> None:
    while True:
        for peer in list(mirror.peers):
            try:
                await step(mirror, peer)
            except Exception:
                log.exception("keeping in step with %s failed", peer)
        await asyncio.sleep(mirror.cfg.peer_interval)


async def step(mirror: Mirror, peer: str) -> dict[str, list[str]]:
    """One read of `peer`: what was copied and what was removed (the copies still under way are not waited for)."""
    seen = mirror.peers.setdefault(peer, {"ok": None, "at": 0.0, "error": ""})
    try:
        state = await _read(peer, mirror)
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        if seen.get("ok") is not False:
            log.warning("the peer mirror %s did not answer (%s); trying again in %.0f s", peer,
                        str(e) or type(e).__name__, mirror.cfg.peer_interval)
        seen.update(ok=False, at=mirror.clock(), error=str(e) or type(e).__name__)
        return {"copying": [], "removed": []}
    seen.update(ok=True, at=mirror.clock(), error="")
    holdings = mirror.holdings
    removed_here = []
    for name, when in (state.get("removed") or {}).items():
        try:
            key, when = FileKey.parse(str(name)), float(when)
        except (BadKey, TypeError, ValueError):
            continue
        held = holdings.get(key)
        if held is not None and held.added_at < when and not holdings.users(key):
            holdings.remove(key, when)
            removed_here.append(str(key))
            log.info("removed %s, which the peer %s removed", key, peer)
        elif held is None and holdings.removed.get(str(key), 0.0) < when:
            # Not here: remember the removal all the same, so a third copy never comes back through this one.
            holdings.removed[str(key)] = when
    if removed_here:
        holdings.save()
    copying = []
    for row in state.get("held") or []:
        try:
            key = FileKey.parse(str(row["key"]))
            sha = check_sha256(str(row.get("sha256") or ""))
            added = float(row.get("added_at") or 0)
        except (BadKey, KeyError, TypeError, ValueError):
            continue
        if holdings.get(key) is not None or mirror.fetcher.busy(key):
            continue
        if holdings.removed.get(str(key), 0.0) >= added:
            continue  # removed here after the peer got it: the peer will remove it at its next read of this one
        wanted = holdings.wanted.get(str(key))
        if wanted is not None and wanted.sha256 and wanted.sha256 != sha:
            log.warning("the peer %s lists %s with sha256 %s, not the %s pinned; not copied", peer, key, sha,
                        wanted.sha256)
            continue
        task = mirror.fetcher.start(Wanting(key, hub_url(peer, key), sha, int(row.get("size") or 0),
                                            str(row.get("scan") or ""), origin=peer, ssl=mirror.peer_ssl))
        task.add_done_callback(_quiet)
        copying.append(str(key))
    return {"copying": copying, "removed": removed_here}


async def _read(peer: str, mirror: Mirror) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=mirror.peer_ssl or True),
                                     timeout=timeout) as session, \
            session.get(f"{peer}/mirror/v1/state") as r:
        if r.status != 200:
            raise ValueError(f"it answered {r.status} to the list it keeps")
        body = await r.json()
    if not isinstance(body, dict):
        raise ValueError("its list is not a JSON object")
    return body


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
