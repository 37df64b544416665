"""What each ready replica's engine says of its own work, read when a person asks (`ctl replicas`, /admin/nodes).

The routers read the same pages every two seconds for their choices
(router/scrape.py), but they live in the worker processes, where this
process's admin API cannot see them. So a view that wants the figures reads
each engine's /metrics once, all at once, with a short timeout, and only when
asked (`?engine=1`): the polling that scripts and the console do of the
replica list reads none. It gives the queues
and KV cache as they are now, and since the engine started the share of
prompt tokens its prefix cache held and its mean time to a first token.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from llmgw.router import read_once

TIMEOUT_S = 1.5


async def engine_figures(replicas: list[dict[str, Any]], key: str | None) -> None:
    """Put an `engine` entry in each ready replica's view: its figures, or None when its page said none."""
    ready = [r for r in replicas if r.get("state") == "ready" and r.get("url")]
    if not ready:
        return
    async with aiohttp.ClientSession() as session:
        loads = await asyncio.gather(*(read_once(session, r["url"], key, TIMEOUT_S) for r in ready))
    for replica, load in zip(ready, loads, strict=True):
        replica["engine"] = None if load is None else {
            "running": load.running, "waiting": load.waiting, "kv_usage": load.kv_usage,
            "prefix_hit_rate": load.prefix_hit_rate, "ttft_s": load.engine_ttft,
        }
