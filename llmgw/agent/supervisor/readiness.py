"""Whether an engine can take requests: its /health says so and it lists the model.

Some engines answer /health 200 from the moment their HTTP server is up
and say only in the body that the weights are still loading (FreeToken's
`{"status":"loading",…}`), while already listing the model in /v1/models;
routed to then, every request fails. So a 200 whose body says `loading`,
or whose JSON status is one of the not-yet words, is not ready. A body
that is empty, text, or some other JSON is: most engines answer that way.
"""

from __future__ import annotations

import json

import aiohttp

INTERVAL_S = 0.5
_NOT_READY = {"loading", "starting", "initializing", "warming_up", "error", "unhealthy"}
_MAX_BODY = 64 << 10


async def check(session: aiohttp.ClientSession, url: str, model: str, api_key: str = "",
                timeout_s: float = 2.0, health_path: str = "/health") -> str:
    """"" when the engine at url (its root, no /v1) serves model; otherwise what it is waiting for, in words.

    An engine whose adapter names another `health_path` than /health is no OpenAI server (ComfyUI answers
    /system_stats once it can take work, and lists no models): a 200 there is the whole check."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    base = url.rstrip("/")
    try:
        async with session.get(base + health_path, headers=headers, timeout=timeout) as r:
            body = await r.content.read(_MAX_BODY)
            if r.status != 200:
                return f"{health_path} answers {r.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return f"{health_path} does not answer ({type(e).__name__})"
    if health_path != "/health":
        return ""
    text = body.decode("utf-8", errors="replace")
    status = _json_status(text)
    if status in _NOT_READY:
        return f"/health says {status}"
    if "loading" in text.lower():
        return "/health says loading"
    try:
        async with session.get(base + "/v1/models", headers=headers, timeout=timeout) as r:
            if r.status != 200:
                return f"/v1/models answers {r.status}"
            listed = await r.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
        return f"/v1/models does not answer with a list ({type(e).__name__})"
    names = set()
    if isinstance(listed, dict) and isinstance(listed.get("data"), list):
        names = {m.get("id") for m in listed["data"] if isinstance(m, dict)}
    if model and model not in names:
        return f"/v1/models does not list {model}"
    return ""


def _json_status(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    if isinstance(body, dict) and isinstance(body.get("status"), str):
        return body["status"].strip().lower()
    return ""
