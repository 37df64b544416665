"""Limits at each level of the tree."""

from __future__ import annotations

from llmgw.store import Limits


async def test_limits_put_are_read_back_whole(store):
    limits = Limits(scope="project", scope_id="prj_1", rpm=60, tpm=100_000,
                    budget_micros=25_000_000, period="month", models=["llama-3-8b", "qwen"],
                    expires_at=1800000000.0)
    await store.put_limits(limits)
    assert await store.get_limits("project", "prj_1") == limits


async def test_putting_limits_again_replaces_every_field(store):
    await store.put_limits(Limits(scope="key", scope_id="key_1", rpm=60, tpm=1000,
                                  budget_micros=5, period="day", models=["a"]))
    await store.put_limits(Limits(scope="key", scope_id="key_1", rpm=10))

    assert await store.get_limits("key", "key_1") == Limits(scope="key", scope_id="key_1", rpm=10)


async def test_a_level_without_limits_of_its_own_has_none(store):
    await store.put_limits(Limits(scope="team", scope_id="team_1", rpm=5))
    assert await store.get_limits("team", "team_2") is None
    assert await store.get_limits("org", "team_1") is None
