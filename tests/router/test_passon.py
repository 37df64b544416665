"""A standby passes /v1 on to the leader with the body the leader's own handler would have read."""

from __future__ import annotations

import gzip
import hashlib
import time
from types import SimpleNamespace

import aiohttp
import orjson
from aiohttp import web

from llmgw.router.passon import pass_on

MAX_BODY = 256 * 1024


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def _leader_and_standby():
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                                  "encoding": request.headers.get("Content-Encoding")})

    leader = web.Application()
    leader.router.add_post("/v1/chat/completions", echo)
    leader_runner, leader_url = await _serve(leader)
    session = aiohttp.ClientSession()
    lease = SimpleNamespace(address=leader_url, expires_at=time.time() + 60)

    async def passed(request: web.Request) -> web.StreamResponse:
        return await pass_on(request, session, "cp-b", lease, MAX_BODY, 30.0)

    standby = web.Application()
    standby.router.add_post("/v1/chat/completions", passed)
    standby_runner, standby_url = await _serve(standby)
    return (leader_runner, standby_runner, session), standby_url


async def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        async with client.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
            return r.status, orjson.loads(await r.read())


async def test_a_gzip_body_of_many_chunks_reaches_the_leader_whole_and_inflated():
    (leader, standby, session), url = await _leader_and_standby()
    try:
        plain = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 150_000}]})
        # Random-ish text so the compressed body is long enough to arrive in several reads.
        plain = plain.replace(b"x" * 150_000, hashlib.sha512(b"seed").hexdigest().encode() * 1170)
        status, seen = await _post(url, gzip.compress(plain), {"Content-Encoding": "gzip"})
        assert status == 200
        assert seen == {"bytes": len(plain), "sha256": hashlib.sha256(plain).hexdigest(), "encoding": None}
    finally:
        await session.close()
        await standby.cleanup()
        await leader.cleanup()


async def test_a_body_that_is_not_gzip_or_inflates_past_the_limit_is_refused_by_the_standby():
    (leader, standby, session), url = await _leader_and_standby()
    try:
        status, doc = await _post(url, b"not gzip at all", {"Content-Encoding": "gzip"})
        assert status == 400 and doc["error"]["code"] == "invalid_encoding"
        status, doc = await _post(url, gzip.compress(b" " * (MAX_BODY * 8)), {"Content-Encoding": "gzip"})
        assert status == 413 and doc["error"]["code"] == "request_too_large"
    finally:
        await session.close()
        await standby.cleanup()
        await leader.cleanup()
