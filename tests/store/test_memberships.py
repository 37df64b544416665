"""Memberships in the store, and the tree's levels made one at a time."""

from __future__ import annotations

import pytest

from llmgw.store import ApiKey, Conflict, Membership, Person, StoreError


async def test_a_membership_added_twice_is_kept_once_and_found_from_both_sides(store):
    await store.add_person(Person(id="psn_1", email="ada@example.com", name="Ada"))
    joined = Membership("psn_1", "team", "team_x", created_at=10.0)

    await store.add_membership(joined)
    await store.add_membership(Membership("psn_1", "team", "team_x", created_at=20.0))
    await store.add_membership(Membership("psn_1", "org", "org_x", created_at=30.0))

    assert await store.memberships("psn_1") == [Membership("psn_1", "org", "org_x", 30.0), joined]
    assert await store.members_of("team", "team_x") == [joined]

    await store.remove_membership("psn_1", "team", "team_x")
    await store.remove_membership("psn_1", "team", "team_x")  # leaving twice is not an error
    assert await store.members_of("team", "team_x") == []


async def test_a_membership_for_nobody_is_refused_with_a_sentence(store):
    with pytest.raises(StoreError, match="there is no person with the id psn_ghost to make a member"):
        await store.add_membership(Membership("psn_ghost", "org", "org_x"))


async def test_the_tree_is_made_a_level_at_a_time_and_a_taken_name_is_refused(store):
    org = await store.create_org("Acme")
    team = await store.create_team(org.id, "Research")
    path = await store.create_project(team.id, "search")

    assert str(path) == "Acme/Research/search"
    assert await store.project_by_path("Acme", "Research", "search") == path
    with pytest.raises(Conflict, match="there is already an org named Acme"):
        await store.create_org("Acme")
    with pytest.raises(Conflict, match="that org already has a team named Research"):
        await store.create_team(org.id, "Research")
    with pytest.raises(Conflict, match="that team already has a project named search"):
        await store.create_project(team.id, "search")
    with pytest.raises(StoreError, match="there is no team with the id team_nope to hold the project x"):
        await store.create_project("team_nope", "x")


async def test_keys_are_listed_by_person_a_page_at_a_time_and_counted(store):
    path = await store.ensure_project("Acme", "Research", "search")
    await store.add_person(Person(id="psn_1", email="ada@example.com", name="Ada"))
    for n in range(5):
        await store.add_key(ApiKey(id=f"key_{n}", name=f"k{n}", project_id=path.project.id,
                                   digest=bytes([n]) * 32, prefix=f"sk-{n}",
                                   person_id="psn_1" if n % 2 == 0 else None, created_at=float(n)))

    mine = await store.list_keys(person_id="psn_1")
    assert [k.id for k in mine] == ["key_0", "key_2", "key_4"]
    assert [k.id for k in await store.list_keys(limit=2, offset=2)] == ["key_2", "key_3"]
    assert [k.id for k in await store.list_keys(path.project.id, person_id="psn_1", limit=2)] == ["key_0", "key_2"]
    assert await store.count_keys(person_id="psn_1") == 3
    assert await store.count_keys(path.project.id) == 5
    assert await store.count_keys("prj_other") == 0
