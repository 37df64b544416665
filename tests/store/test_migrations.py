"""Migrations: applied at open, in order, once; a newer store is refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import zipfile

import pytest

import llmgw
from llmgw.store import SchemaTooNew, open_store, redact_url
from llmgw.store.migrate import known_migrations, latest_version

from .rawsql import raw_fetch


def dialect(url: str) -> str:
    return "sqlite" if url.startswith("sqlite:") else "postgres"


async def test_a_new_store_is_brought_to_the_latest_schema_and_records_each_step(new_store_url):
    # The one test that opens an empty store with every migration to run; the
    # `store` fixture hands out copies of one store migrated per session.
    store = await open_store(new_store_url)
    try:
        assert await store.schema_version() == latest_version(dialect(new_store_url))
    finally:
        await store.close()
    recorded = await raw_fetch(new_store_url, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert recorded == [(m.version, m.name) for m in known_migrations(dialect(new_store_url))]
    assert recorded[0] == (1, "initial")


async def test_reopening_a_store_applies_no_migration_a_second_time(new_store_url):
    first = await open_store(new_store_url)
    await first.close()
    before = await raw_fetch(new_store_url, "SELECT version, applied_at FROM schema_migrations ORDER BY version")

    again = await open_store(new_store_url)
    await again.close()

    after = await raw_fetch(new_store_url, "SELECT version, applied_at FROM schema_migrations ORDER BY version")
    assert after == before


async def test_a_store_migrated_by_a_newer_llmgw_is_refused_with_what_to_do(new_store_url):
    opened = await open_store(new_store_url)
    await opened.close()
    known = latest_version(dialect(new_store_url))
    await raw_fetch(
        new_store_url,
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
        known + 1, "from_the_future", 0.0,
    )

    with pytest.raises(SchemaTooNew) as refused:
        await open_store(new_store_url)

    assert str(refused.value) == (
        f"the store at {redact_url(new_store_url)} was migrated by a newer llmgw "
        f"(schema {known + 1}; this llmgw knows up to {known}); run the newer llmgw or restore a backup"
    )
    with pytest.raises(SchemaTooNew):
        await open_store(new_store_url, migrate=False)


async def test_opening_without_migrating_changes_nothing_in_a_new_store(new_store_url):
    opened = await open_store(new_store_url, migrate=False)
    try:
        assert await opened.schema_version() == 0
    finally:
        await opened.close()
    migrated = await open_store(new_store_url)
    try:
        assert await migrated.schema_version() == latest_version(dialect(new_store_url))
    finally:
        await migrated.close()


async def test_control_planes_opening_one_fresh_store_at_once_apply_each_migration_once(new_store_url):
    stores = await asyncio.gather(*(open_store(new_store_url) for _ in range(5)))
    try:
        versions = [await s.schema_version() for s in stores]
    finally:
        await asyncio.gather(*(s.close() for s in stores))

    assert versions == [latest_version(dialect(new_store_url))] * 5
    counts = await raw_fetch(new_store_url, "SELECT version, COUNT(*) FROM schema_migrations GROUP BY version")
    assert all(count == 1 for _, count in counts)


def test_the_migrations_are_found_when_llmgw_runs_from_a_zipapp(tmp_path):
    # llmgw ships as a zipapp: there is no directory to list, only the
    # archive, and a store opened from it must still find its SQL files.
    package = os.path.dirname(llmgw.__file__)
    archive = tmp_path / "llmgw.pyz"
    with zipfile.ZipFile(archive, "w") as z:
        for folder, _, files in os.walk(package):
            for name in files:
                if not name.endswith(".pyc"):
                    path = os.path.join(folder, name)
                    z.write(path, os.path.relpath(path, os.path.dirname(package)))
    program = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "import llmgw.store\n"
        "assert llmgw.store.__file__.startswith(sys.path[0]), llmgw.store.__file__\n"
        "async def main():\n"
        f"    s = await llmgw.store.open_store({'sqlite:' + str(tmp_path / 'z.db')!r})\n"
        "    print(await s.schema_version())\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(latest_version("sqlite"))
