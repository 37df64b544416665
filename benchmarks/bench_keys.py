"""How fast a control plane checks API keys: in memory, and through a real server.

Prints:
  keycache_hit_ns: the cost of one cached key lookup (hash + dict), in-process
  v1_models_rps / _p50_ms / _p99_ms: an authenticated GET /v1/models against a
  real `llmgw server` on loopback, 32 connections for 5 seconds. The load
  generator shares the machine's cores with the server, so this is a floor.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def keycache_hit_ns() -> float:
    from llmgw.account.keycache import KeyCache
    from llmgw.account.service import Accounts, Actor
    from llmgw.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = await open_store(f"sqlite:{tmp}/b.db")
        _, secret = await Accounts(store).create_key(Actor("bench", "cli"), name="b", project="B/b/b")
        cache = KeyCache(store, ttl=lambda: 3600)
        await cache.lookup(secret)
        n = 200_000
        start = time.perf_counter()
        for _ in range(n):
            await cache.lookup(secret)
        took = time.perf_counter() - start
        await store.close()
        return took / n * 1e9


async def load(url: str, key: str, seconds: float, connections: int) -> list[float]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            async with session.get(url, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status
            latencies.append(time.perf_counter() - start)

    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    return latencies


def main() -> int:
    print(f"keycache_hit_ns: {asyncio.run(keycache_hit_ns()):.0f} ns")
    with tempfile.TemporaryDirectory() as tmp:
        ports = {r: free_port() for r in ("client", "agent", "admin", "metrics")}
        args = ["--data-dir", tmp] + [a for r, p in ports.items() for a in (f"--listen-{r}", f"127.0.0.1:{p}")]
        init = subprocess.run([sys.executable, "-m", "llmgw", "server", "init", *args, "--json"],
                              capture_output=True, text=True, check=True)
        key = json.loads(init.stdout)["key"]["key"]
        proc = subprocess.Popen([sys.executable, "-m", "llmgw", "server", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{ports['client']}"
            for _ in range(100):
                try:
                    with socket.create_connection(("127.0.0.1", ports["client"]), timeout=0.2):
                        break
                except OSError:
                    time.sleep(0.1)
            asyncio.run(load(url + "/v1/models", key, 1, 4))  # warm the cache and the connections
            seconds = 5.0
            latencies = sorted(asyncio.run(load(url + "/v1/models", key, seconds, 32)))
            print(f"v1_models_rps: {len(latencies) / seconds:.0f} req/s")
            print(f"v1_models_p50_ms: {latencies[len(latencies) // 2] * 1000:.2f} ms")
            print(f"v1_models_p99_ms: {latencies[int(len(latencies) * 0.99)] * 1000:.2f} ms")
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
