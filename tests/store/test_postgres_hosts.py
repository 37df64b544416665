"""A PostgreSQL address with several hosts: the first that takes writes is used, and failures name them all.

The whole failover, with Patroni moving the primary while a gateway writes,
is tests/integration/test_store_failover.py; these pin what the address
does on one real server.
"""

from __future__ import annotations

import subprocess

import pytest

from llmgw.store import StoreUnavailable, Usage, open_store
from tests.support.pgcluster import free_port


def _several(url: str, *ports: int, attrs: str = "read-write") -> str:
    """`url` (one host) with the hosts 127.0.0.1:PORT… put before its own, asking for `attrs`."""
    head, rest = url.split("@", 1)
    own, path = rest.split("/", 1)
    hosts = ",".join([*(f"127.0.0.1:{p}" for p in ports), own])
    return f"{head}@{hosts}/{path}?target_session_attrs={attrs}"


def _psql(cluster, database: str, sql: str) -> None:
    subprocess.run([f"{cluster.bin}/psql", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "llmgw",
                    "-d", database, "-v", "ON_ERROR_STOP=1", "-c", sql],
                   check=True, capture_output=True, timeout=30, env={"PGPASSWORD": cluster.password})


async def test_a_store_whose_first_host_is_down_is_opened_on_the_next_and_works(postgres_cluster):
    down = free_port()
    url = _several(postgres_cluster.create_database(), down)

    store = await open_store(url, timeout=2)
    try:
        await store.add_usage([Usage(id="req_1", at=1.0, key_id="k", project_id=None, model="m")])
        assert (await store.usage_by_id("req_1")) is not None
    finally:
        await store.close()


async def test_a_store_whose_hosts_all_refuse_names_every_host_tried_and_no_password():
    first, second = free_port(), free_port()
    url = (f"postgresql://llmgw:hunter2secret@127.0.0.1:{first},127.0.0.1:{second}/llmgw"
           "?target_session_attrs=read-write")

    with pytest.raises(StoreUnavailable) as refused:
        await open_store(url, timeout=1)

    assert str(refused.value) == (
        f"the store at postgresql://llmgw:***@127.0.0.1:{first},127.0.0.1:{second}/llmgw"
        "?target_session_attrs=read-write refused the connection "
        f"(tried 127.0.0.1:{first} and 127.0.0.1:{second}); is PostgreSQL running on them, "
        "with one of them the primary? Under Patroni, a failover takes up to its ttl"
    )


async def test_a_store_whose_hosts_are_all_read_only_says_none_takes_writes(postgres_cluster):
    # A standby reports itself read-only when a client connects; a database
    # whose sessions default to read-only is seen by asyncpg the same way.
    # The one server is listed twice: with a host down among them asyncpg
    # reports that host's refusal instead, the last error it met.
    url = postgres_cluster.create_database()
    database = url.rsplit("/", 1)[1]
    _psql(postgres_cluster, database, f"ALTER DATABASE {database} SET default_transaction_read_only = on")

    with pytest.raises(StoreUnavailable) as refused:
        await open_store(_several(url, postgres_cluster.port), timeout=2)

    assert "has no host that takes writes: those that answered are standbys" in str(refused.value)
    assert postgres_cluster.password not in str(refused.value)
