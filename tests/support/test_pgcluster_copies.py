"""The store tests' PostgreSQL copies: a copy a test gives back is emptied for the next, never handed on with a
row or a change of schema that test made."""

from __future__ import annotations

import asyncio

import asyncpg

from llmgw.store import AuditEntry, open_store


async def _run(url: str, *sql: str) -> list:
    conn = await asyncpg.connect(url)
    try:
        out = []
        for statement in sql:
            out.append(await conn.fetch(statement))
        return out
    finally:
        await conn.close()


def _migrated(cluster, name: str) -> str:
    url = cluster.create_database(name)

    async def migrate() -> None:
        store = await open_store(url)
        await store.close()
    asyncio.run(migrate())
    return name


def test_a_copy_given_back_is_emptied_of_its_rows_and_handed_to_the_next_test_with_its_migrations(postgres_cluster):
    template = _migrated(postgres_cluster, "copies_a")
    first = postgres_cluster.copy_of(template)
    migrations = asyncio.run(_run(first, "SELECT count(*) FROM schema_migrations"))[0][0][0]
    tables = [r[0] for r in asyncio.run(_run(first, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                                     "AND tablename <> 'schema_migrations'"))[0]]
    # Rows a test leaves, written through the store itself.
    async def write() -> None:
        store = await open_store(first)
        try:
            for i in range(3):
                await store.add_audit(AuditEntry(1.0 + i, "alice", "cli", "model.add", f"model:m{i}", None, {}))
        finally:
            await store.close()
    asyncio.run(write())
    assert asyncio.run(_run(first, "SELECT count(*) FROM audit"))[0][0][0] == 3
    postgres_cluster.give_back(first, template)
    second = postgres_cluster.copy_of(template)
    assert second == first
    counts = asyncio.run(_run(second, *(f"SELECT count(*) FROM {t}" for t in tables)))
    assert [c[0][0] for c in counts] == [0] * len(tables)
    assert asyncio.run(_run(second, "SELECT count(*) FROM schema_migrations"))[0][0][0] == migrations
    postgres_cluster.give_back(second, template)


def test_a_copy_whose_schema_a_test_changed_is_dropped_not_handed_on(postgres_cluster):
    template = _migrated(postgres_cluster, "copies_b")
    first = postgres_cluster.copy_of(template)
    asyncio.run(_run(first, "CREATE TABLE left_behind (x int)"))
    postgres_cluster.give_back(first, template)
    second = postgres_cluster.copy_of(template)
    assert second != first
    names = asyncio.run(_run(postgres_cluster.url(), "SELECT datname FROM pg_database"))[0]
    assert first.rsplit("/", 1)[1] not in {r[0] for r in names}
    postgres_cluster.give_back(second, template)


def test_a_session_a_test_left_open_in_a_transaction_does_not_keep_its_copy_from_being_emptied(postgres_cluster):
    template = _migrated(postgres_cluster, "copies_c")
    url = postgres_cluster.copy_of(template)

    async def leave_one_open() -> asyncpg.Connection:
        conn = await asyncpg.connect(url)
        await conn.execute("BEGIN; LOCK TABLE audit IN ACCESS EXCLUSIVE MODE")
        return conn
    loop = asyncio.new_event_loop()
    leaked = loop.run_until_complete(leave_one_open())
    try:
        postgres_cluster.give_back(url, template)
        assert postgres_cluster.copy_of(template) == url
        assert asyncio.run(_run(url, "SELECT count(*) FROM audit"))[0][0][0] == 0
    finally:
        loop.run_until_complete(leaked.close(timeout=1))
        loop.close()
