"""A real HTTP server on loopback standing in for a model's origin (a web server, Hugging Face, the mirror)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass

import pytest
from aiohttp import web

from llmgw.agent.weights import Attempts, Weights


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    if_range: str | None
    authorization: str | None


class Origin:
    """Serves `files` (URL path → bytes) with ETags and Range, and can misbehave on purpose.

    cut[path] = N: the next answer for path ends after byte N, the connection closed under it.
    stall[path] = N: the next answer sends N bytes and then nothing more, until the test ends.
    ranges = False: a server that answers every Range with the whole file, 200.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.seen: list[Seen] = []
        self.cut: dict[str, int] = {}
        self.stall: dict[str, int] = {}
        self.ranges = True
        self.status: dict[str, int] = {}
        self.url = ""
        self._release = asyncio.Event()

    def etag(self, body: bytes) -> str:
        return '"' + hashlib.sha256(body).hexdigest()[:16] + '"'

    def gets(self, path: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.method == "GET" and (path is None or s.path == path)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.seen.append(Seen(request.method, path, request.headers.get("Range"),
                              request.headers.get("If-Range"), request.headers.get("Authorization")))
        if path in self.status:
            return web.Response(status=self.status[path], text="no")
        body = self.files.get(path)
        if body is None:
            return web.Response(status=404, text="not here")
        etag = self.etag(body)
        headers = {"ETag": etag, "Accept-Ranges": "bytes"}
        start, status = 0, 200
        asked = re.match(r"^bytes=(\d+)-$", request.headers.get("Range", ""))
        if asked and self.ranges and request.headers.get("If-Range", etag) == etag:
            start = int(asked.group(1))
            if start >= len(body):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(body)}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
        resp = web.StreamResponse(status=status, headers=headers)
        resp.content_length = len(body) - start
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        if path in self.cut:
            end = self.cut.pop(path)
            await resp.write(body[start:end])
            request.transport.close()
            return resp
        if path in self.stall:
            end = self.stall.pop(path)
            await resp.write(body[start:end])
            await self._release.wait()
            return resp
        await resp.write(body[start:])
        await resp.write_eof()
        return resp


@pytest.fixture
async def origin():
    server = Origin()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.url = f"http://{host}:{port}"
    yield server
    server._release.set()
    await runner.cleanup()


@pytest.fixture
def cache_dir(tmp_path):
    path = tmp_path / "cache"
    path.mkdir()
    return path


@pytest.fixture
async def weights(cache_dir, origin):
    w = Weights(cache_dir, hf_endpoint=origin.url,
                progress_interval=0, attempts=Attempts(tries=3, delays=(0.0,)))
    yield w
    await w.close()
