"""The tenancy tree: orgs, their teams, the teams' projects."""

from __future__ import annotations

import asyncio

import pytest


async def test_ensure_project_makes_each_missing_level_and_names_them_as_a_path(store):
    path = await store.ensure_project("acme", "research", "chatbot")

    assert str(path) == "acme/research/chatbot"
    assert path.org.id.startswith("org_")
    assert path.team.id.startswith("team_") and path.team.org_id == path.org.id
    assert path.project.id.startswith("prj_") and path.project.team_id == path.team.id
    assert path.org.created_at > 0


async def test_ensure_project_twice_returns_the_same_project(store):
    first = await store.ensure_project("acme", "research", "chatbot")
    again = await store.ensure_project("acme", "research", "chatbot")
    assert again == first


async def test_a_new_project_under_an_existing_team_reuses_the_org_and_team(store):
    chatbot = await store.ensure_project("acme", "research", "chatbot")
    search = await store.ensure_project("acme", "research", "search")
    elsewhere = await store.ensure_project("acme", "sales", "chatbot")

    assert search.team == chatbot.team and search.project.id != chatbot.project.id
    assert elsewhere.org == chatbot.org and elsewhere.team.id != chatbot.team.id
    assert [t.name for t in await store.list_teams(chatbot.org.id)] == ["research", "sales"]
    assert [p.name for p in await store.list_projects(chatbot.team.id)] == ["chatbot", "search"]


async def test_callers_racing_to_make_one_project_all_get_the_same_one(store):
    paths = await asyncio.gather(*(store.ensure_project("acme", "research", "chatbot") for _ in range(12)))

    assert len({(p.org.id, p.team.id, p.project.id) for p in paths}) == 1
    assert len(await store.list_orgs()) == 1
    assert len(await store.list_teams()) == 1
    assert len(await store.list_projects()) == 1


async def test_callers_racing_over_sibling_projects_share_their_org_and_team(store):
    paths = await asyncio.gather(*(store.ensure_project("acme", "research", f"p{n}") for n in range(8)))

    assert len({p.org.id for p in paths}) == 1
    assert len({p.team.id for p in paths}) == 1
    assert len({p.project.id for p in paths}) == 8


async def test_each_level_is_found_by_id_and_by_name(store):
    path = await store.ensure_project("acme", "research", "chatbot")

    assert await store.project_by_path("acme", "research", "chatbot") == path
    assert await store.project_path(path.project.id) == path
    assert await store.org_by_id(path.org.id) == path.org
    assert await store.org_by_name("acme") == path.org
    assert await store.team_by_id(path.team.id) == path.team
    assert await store.team_by_name(path.org.id, "research") == path.team


@pytest.mark.parametrize("missing", [
    ("acme", "research", "nope"), ("acme", "nope", "chatbot"), ("nope", "research", "chatbot"),
])
async def test_a_path_that_does_not_exist_is_none(store, missing):
    await store.ensure_project("acme", "research", "chatbot")
    assert await store.project_by_path(*missing) is None


async def test_lookups_of_unknown_ids_and_names_are_none(store):
    assert await store.project_path("prj_nope") is None
    assert await store.org_by_id("org_nope") is None
    assert await store.team_by_id("team_nope") is None
    assert await store.org_by_name("nope") is None
    assert await store.team_by_name("org_nope", "research") is None


async def test_orgs_teams_and_projects_are_listed_by_name(store):
    await store.ensure_project("zeta", "b-team", "two")
    await store.ensure_project("alpha", "a-team", "one")

    assert [o.name for o in await store.list_orgs()] == ["alpha", "zeta"]
    assert [t.name for t in await store.list_teams()] == ["a-team", "b-team"]
    assert [p.name for p in await store.list_projects()] == ["one", "two"]
