"""The mirror's API as its callers see it: `llmgw mirror` on the mirror's machine, the leading control plane
(which tells each mirror the catalog's pins and reads what they hold), and the bench.

    client = MirrorClient("https://10.0.0.9:8600", ssl_context)
    listing = await client.files()
    await client.add("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from llmgw.mirror.service import MirrorError


class MirrorUnreachable(MirrorError):
    """The mirror did not answer."""

    def __init__(self, message: str):
        super().__init__(message, 502)


class MirrorClient:
    def __init__(self, base: str, ssl_context: ssl.SSLContext | None, timeout: float = 30):
        self.base = base.rstrip("/")
        self.ssl = ssl_context
        self.timeout = timeout

    async def files(self) -> dict[str, Any]:
        return await self._call("GET", "/mirror/v1/files")

    async def state(self) -> dict[str, Any]:
        return await self._call("GET", "/mirror/v1/state")

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/health")

    async def add(self, source: str, sha256: str = "", timeout: float | None = None) -> dict[str, Any]:
        """Pin and fetch; answers once the files are here, so a big one takes as long as it takes."""
        return await self._call("POST", "/mirror/v1/files", {"source": source, "sha256": sha256}, timeout=timeout)

    async def remove(self, what: str) -> dict[str, Any]:
        return await self._call("DELETE", "/mirror/v1/files/" + quote(what.strip("/"), safe="/"))

    async def want(self, files: list[dict[str, Any]], from_hub: bool = True) -> dict[str, Any]:
        return await self._call("PUT", "/mirror/v1/wanted", {"files": files, "from_hub": from_hub})

    async def import_dir(self, folder: str, timeout: float | None = None) -> dict[str, Any]:
        return await self._call("POST", "/mirror/v1/import", {"dir": folder}, timeout=timeout)

    async def _call(self, method: str, path: str, body: Any = None, timeout: float | None = -1.0) -> dict[str, Any]:
        limit = aiohttp.ClientTimeout(total=self.timeout if timeout == -1.0 else timeout, sock_connect=10)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl or True),
                                             timeout=limit) as session, \
                    session.request(method, self.base + path,
                                    data=orjson.dumps(body) if body is not None else None,
                                    headers={"Content-Type": "application/json"} if body is not None else {}) as r:
                raw = await r.read()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as e:
            reason = "it did not answer in time" if isinstance(e, TimeoutError) else str(e) or type(e).__name__
            raise MirrorUnreachable(f"the mirror at {self.base} could not be reached ({reason})") from None
        try:
            answer = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            answer = {}
        if not isinstance(answer, dict):
            raise MirrorError(f"the mirror at {self.base} answered {status} with something that is not its API's")
        if status >= 400:
            error = answer.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            raise MirrorError(str(message or f"the mirror at {self.base} answered {status}"), status)
        return answer
