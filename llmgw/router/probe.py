"""Asking a replica itself whether it is well, when only one client's requests say it is not.

A breaker counts an answer that failed (a 5xx, a timeout) from one API key
as that key's trouble, not the engine's (breaker.py): one key's prompts can
make an engine fail. When such failures reach the count, the replica is
asked `GET {base}/models` — what every OpenAI-compatible engine and
provider answers, cheaply, without running the model — with a bound of
PROBE_TIMEOUT. No answer, or a 5xx, and the breaker opens: the engine is
failing everyone, not just the one key. Any other status (a 401 or 404
included) is an engine that answers, and the breaker stays as it was.

One probe per endpoint at a time, however many failures ask for one.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from llmgw.router.endpoint import Endpoint

log = logging.getLogger("llmgw.probe")

# Long enough for an engine busy with a batch to list its models (they are
# answered by the HTTP front, not the GPU), short enough that a replica that
# stopped answering is passed over within a couple of seconds.
PROBE_TIMEOUT = 2.0

_running: dict[int, asyncio.Task[None]] = {}  # by id(endpoint): one probe each, and a reference so it is not collected


async def failing(session: aiohttp.ClientSession, endpoint: Endpoint, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why the replica looks unwell to a health check, or None when it answers."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        async with session.get(endpoint.url + "/models", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status >= 500:
                return f"its health check (GET /models) answered {response.status}"
            return None
    except TimeoutError:
        return f"its health check (GET /models) did not answer in {timeout:g} s"
    except aiohttp.ClientError as e:
        return f"its health check (GET /models) failed: {type(e).__name__}"


def check(session: aiohttp.ClientSession, endpoint: Endpoint, reason: str) -> None:
    """Probe the endpoint in the background; open its breaker if the probe fails too."""
    key = id(endpoint)
    if key in _running:
        return
    task = asyncio.get_running_loop().create_task(_check(session, endpoint, reason))
    _running[key] = task
    task.add_done_callback(lambda _: _running.pop(key, None))


async def _check(session: aiohttp.ClientSession, endpoint: Endpoint, reason: str) -> None:
    try:
        why = await failing(session, endpoint)
    except Exception:  # a probe must never take the router down with it
        log.exception("the health check of %s could not be made", endpoint.id)
        return
    breaker = endpoint.breaker
    if why is None or breaker.state == "open":
        return
    log.warning("%s is passed over: its requests failed (%s) and %s", endpoint.id, reason, why)
    breaker.trip(f"{reason}; {why}")
