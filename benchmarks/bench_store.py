"""The store's throughput on both dialects, for the work the hot path hands it.

Prints, for sqlite and postgresql:
  usage_rows_per_s: usage rows written in batches of 500 (the usage writer writes at most 100 at once)
  lease_round_ms: one try_lease (what every control plane does every ~3 s)
  settings_version_ms: the read every control plane makes every 2 s
  key_by_digest_ms: one key read, what a key-cache miss costs
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

# The repository's root, for the test kit (tests.support): a bench runs as a script, from benchmarks/.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from llmgw.account.keys import digest
from llmgw.account.service import Accounts, Actor
from llmgw.store import Usage, open_store
from tests.support.pgcluster import PgCluster


def rows(n: int, offset: int, project_id: str) -> list[Usage]:
    now = time.time()
    return [Usage(id=f"req_{offset + i:09d}", at=now, key_id="key_bench", project_id=project_id,
                  model="qwen", endpoint="http://127.0.0.1:9000", prompt_tokens=120, completion_tokens=300,
                  cost_micros=42, duration_ms=800.0, detail={"retries": 0}) for i in range(n)]


async def timed(call, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - start) / n * 1000


async def bench(name: str, url: str) -> None:
    store = await open_store(url)
    view, secret = await Accounts(store).create_key(Actor("bench", "cli"), name="b", project="B/b/b")
    batches, size = 40, 500
    start = time.perf_counter()
    for b in range(batches):
        await store.add_usage(rows(size, b * size, view["project_id"]))
    took = time.perf_counter() - start
    print(f"{name}.usage_rows_per_s: {batches * size / took:.0f} rows/s")
    print(f"{name}.lease_round_ms: {await timed(lambda: store.try_lease('leader', 'bench', 'x', 10), 300):.3f} ms")
    print(f"{name}.settings_version_ms: {await timed(store.settings_version, 500):.3f} ms")
    d = digest(secret)
    print(f"{name}.key_by_digest_ms: {await timed(lambda: store.key_by_digest(d), 500):.3f} ms")
    await store.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench("sqlite", f"sqlite:{tmp}/bench.db"))
    cluster = PgCluster()
    try:
        asyncio.run(bench("postgresql", cluster.create_database()))
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
