"""The answer cache's setting per project: off until set, read back whole, on both dialects."""

from __future__ import annotations

import pytest

from llmgw.store import ProjectCache, StoreError


async def test_a_project_never_set_has_no_cache_setting_which_is_off(store):
    path = await store.ensure_project("Acme", "ml", "train")
    assert await store.get_project_cache(path.project.id) is None
    assert await store.list_project_caches() == []


async def test_a_cache_setting_put_is_read_back_whole(store):
    path = await store.ensure_project("Acme", "support", "desk")
    setting = ProjectCache(path.project.id, ttl=86400.0, similar=0.8, enabled=True, updated_at=1800000000.5)
    await store.put_project_cache(setting)
    assert await store.get_project_cache(path.project.id) == setting


async def test_putting_a_setting_again_replaces_it_threshold_and_all(store):
    path = await store.ensure_project("Acme", "support", "desk")
    await store.put_project_cache(ProjectCache(path.project.id, ttl=3600.0, similar=0.9, updated_at=1.0))
    await store.put_project_cache(ProjectCache(path.project.id, ttl=60.0, similar=None, enabled=False,
                                               updated_at=2.0))
    assert await store.get_project_cache(path.project.id) == ProjectCache(
        path.project.id, ttl=60.0, similar=None, enabled=False, updated_at=2.0)


async def test_every_projects_setting_is_listed_by_project_id(store):
    a = await store.ensure_project("Acme", "ml", "a")
    b = await store.ensure_project("Acme", "ml", "b")
    await store.put_project_cache(ProjectCache(b.project.id, ttl=10.0, updated_at=1.0))
    await store.put_project_cache(ProjectCache(a.project.id, ttl=20.0, similar=0.75, updated_at=1.0))
    listed = await store.list_project_caches()
    assert sorted(listed, key=lambda c: c.project_id) == listed
    assert {c.project_id: (c.ttl, c.similar) for c in listed} == {
        a.project.id: (20.0, 0.75), b.project.id: (10.0, None)}


async def test_a_setting_for_a_project_that_does_not_exist_is_refused_by_name(store):
    with pytest.raises(StoreError, match="prj_nope"):
        await store.put_project_cache(ProjectCache("prj_nope", ttl=10.0, updated_at=1.0))
