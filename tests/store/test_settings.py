"""The cluster's settings: one document, written by compare-and-set."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.store import Conflict


async def test_a_store_without_settings_reports_version_zero(store):
    assert await store.settings_version() == 0
    assert await store.get_settings() is None


async def test_settings_written_on_the_version_read_are_raised_one_version(store):
    first = await store.put_settings({"router": {"retries": 2}}, expected_version=0, by="ada@example.com")
    assert (first.version, first.doc, first.updated_by) == (1, {"router": {"retries": 2}}, "ada@example.com")

    second = await store.put_settings({"router": {"retries": 3}}, expected_version=1, by="bob@example.com")

    assert second.version == 2
    assert await store.settings_version() == 2
    assert await store.get_settings() == second
    assert second.updated_at >= first.updated_at


async def test_settings_written_on_a_stale_version_are_refused_with_the_current_one(store):
    await store.put_settings({"a": 1}, expected_version=0, by="ada")
    await store.put_settings({"a": 2}, expected_version=1, by="bob")

    with pytest.raises(Conflict) as refused:
        await store.put_settings({"a": 3}, expected_version=1, by="carol")

    assert str(refused.value) == (
        "the cluster's settings were changed by someone else (now version 2); read them again"
    )
    assert (await store.get_settings()).doc == {"a": 2}


async def test_a_first_write_is_refused_once_settings_exist(store):
    await store.put_settings({"a": 1}, expected_version=0, by="ada")
    with pytest.raises(Conflict, match=r"now version 1"):
        await store.put_settings({"a": 9}, expected_version=0, by="bob")


async def test_of_administrators_saving_at_once_exactly_one_wins(store):
    await store.put_settings({"n": 0}, expected_version=0, by="init")
    results = await asyncio.gather(
        *(store.put_settings({"n": n}, expected_version=1, by=f"admin{n}") for n in range(8)),
        return_exceptions=True,
    )

    won = [r for r in results if not isinstance(r, Exception)]
    assert len(won) == 1 and won[0].version == 2
    assert all(isinstance(r, Conflict) for r in results if r is not won[0])
    assert (await store.get_settings()).doc == won[0].doc
