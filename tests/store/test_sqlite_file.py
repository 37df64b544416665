"""The embedded store's file: where it goes and how it is opened."""

from __future__ import annotations

import pytest

from llmgw.store import StoreError, StoreUnavailable, open_store

from .rawsql import raw_fetch


async def test_a_store_in_a_directory_that_does_not_exist_yet_makes_it(tmp_path):
    path = tmp_path / "var" / "lib" / "llmgw" / "llmgw.db"
    store = await open_store(f"sqlite:{path}")
    await store.close()
    assert path.is_file()


async def test_the_store_file_is_in_wal_mode(tmp_path):
    url = f"sqlite:{tmp_path / 'llmgw.db'}"
    store = await open_store(url)
    await store.close()
    assert await raw_fetch(url, "PRAGMA journal_mode") == [("wal",)]


async def test_a_three_slash_address_names_an_absolute_path(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/abs.db".replace("////", "///"))
    await store.close()
    assert (tmp_path / "abs.db").is_file()


async def test_an_in_memory_store_works_for_a_quick_look():
    store = await open_store("sqlite::memory:")
    try:
        await store.ensure_project("a", "b", "c")
        assert [o.name for o in await store.list_orgs()] == ["a"]
    finally:
        await store.close()


async def test_a_file_that_is_not_a_database_is_refused_with_a_sentence(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is not a database, only some text long enough to read a header from" * 20)
    with pytest.raises(StoreError, match=f"the store at sqlite:{path} is not an SQLite database"):
        await open_store(f"sqlite:{path}")


async def test_an_address_of_another_kind_is_refused_naming_the_kinds():
    with pytest.raises(StoreError, match=r'the store address "mysql://db/llmgw" is neither sqlite:PATH nor postgresql://HOST/DB'):
        await open_store("mysql://db/llmgw")


async def test_two_stores_on_one_file_see_each_others_writes(tmp_path):
    url = f"sqlite:{tmp_path / 'shared.db'}"
    one, two = await open_store(url), await open_store(url)
    try:
        await one.try_lease("leader", "cp-1", "a", ttl=30)
        assert (await two.try_lease("leader", "cp-2", "b", ttl=30)).holder == "cp-1"
    finally:
        await one.close()
        await two.close()


async def test_a_file_held_locked_by_another_process_is_reported_after_the_timeout(tmp_path):
    import apsw

    url = f"sqlite:{tmp_path / 'busy.db'}"
    store = await open_store(url, timeout=0.2)
    other = apsw.Connection(str(tmp_path / "busy.db"))
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable) as refused:
            await store.try_lease("leader", "cp-1", "a", ttl=10)
        assert str(refused.value) == (
            f"the store at {url} stayed locked by another process for 0.2 s; "
            "is a second llmgw using the same file?"
        )
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (await store.try_lease("leader", "cp-1", "a", ttl=10)).holder == "cp-1"
    await store.close()


async def test_a_new_sqlite_store_can_be_read_by_its_owner_only(tmp_path):
    import os
    import stat

    from llmgw.store import open_store

    path = tmp_path / "new" / "llmgw.db"
    store = await open_store(f"sqlite:{path}")
    await store.ping()
    await store.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
