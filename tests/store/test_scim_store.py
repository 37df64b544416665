"""SCIM's users and groups in the store: unique without regard to case, and members kept per person."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Person, ScimGroup, ScimUser


async def _people(store, *names: str) -> None:
    for name in names:
        await store.add_person(Person(id=f"usr_{name}", email=f"{name}@corp.example", name=name))


async def test_a_scim_user_reads_back_as_written_and_its_username_is_unique_without_regard_to_case(store):
    await _people(store, "ada", "bob")
    ada = ScimUser("u1", "usr_ada", "Ada@Corp.example", "ext-1", {"name": {"givenName": "Ada"}}, 1.0, 1.0)
    await store.add_scim_user(ada)

    assert await store.scim_user("u1") == ada
    assert await store.scim_user_by_name("ada@corp.EXAMPLE") == ada
    assert await store.scim_user_of("usr_ada") == ada
    with pytest.raises(Conflict):
        await store.add_scim_user(ScimUser("u2", "usr_bob", "ADA@corp.example", None, {}, 2.0, 2.0))
    with pytest.raises(Conflict):  # one SCIM user per account
        await store.add_scim_user(ScimUser("u3", "usr_ada", "other", None, {}, 2.0, 2.0))

    await store.add_scim_user(ScimUser("u2", "usr_bob", "bob", None, {}, 2.0, 2.0))
    renamed = ScimUser("u1", "usr_ada", "ada.king", None, {"active": True}, 1.0, 3.0)
    await store.update_scim_user(renamed)
    assert await store.scim_user("u1") == renamed
    with pytest.raises(Conflict):
        await store.update_scim_user(ScimUser("u2", "usr_bob", "ADA.KING", None, {}, 2.0, 4.0))
    assert [u.id for u in await store.list_scim_users()] == ["u1", "u2"]


async def test_a_deleted_scim_user_leaves_its_groups_and_the_person_stays(store):
    await _people(store, "ada")
    await store.add_scim_user(ScimUser("u1", "usr_ada", "ada", None, {}, 1.0, 1.0))
    await store.add_scim_group(ScimGroup("g1", "ML Engineers", None, 1.0, 1.0))
    await store.add_scim_group_members("g1", ["usr_ada"])

    assert await store.delete_scim_user("u1") is True
    assert await store.delete_scim_user("u1") is False
    assert await store.scim_group_members("g1") == []
    assert await store.person_by_id("usr_ada") is not None


async def test_groups_are_named_uniquely_without_regard_to_case_and_know_their_members(store):
    await _people(store, "ada", "bob")
    ml = ScimGroup("g1", "ML Engineers", "ext-g", 1.0, 1.0)
    await store.add_scim_group(ml)
    with pytest.raises(Conflict):
        await store.add_scim_group(ScimGroup("g2", "ml engineers", None, 2.0, 2.0))
    ops = ScimGroup("g2", "Ops", None, 2.0, 2.0)
    await store.add_scim_group(ops)

    await store.add_scim_group_members("g1", ["usr_ada", "usr_bob"])
    await store.add_scim_group_members("g1", ["usr_ada"])  # twice is once
    await store.add_scim_group_members("g2", ["usr_ada"])
    assert await store.scim_group_members("g1") == ["usr_ada", "usr_bob"]
    assert [g.display_name for g in await store.scim_groups_of("usr_ada")] == ["ML Engineers", "Ops"]

    await store.remove_scim_group_members("g1", ["usr_bob"])
    assert await store.scim_group_members("g1") == ["usr_ada"]
    assert await store.scim_group_by_name("ml ENGINEERS") == ml

    renamed = ScimGroup("g2", "Operators", None, 2.0, 5.0)
    await store.update_scim_group(renamed)
    assert await store.scim_group("g2") == renamed
    with pytest.raises(Conflict):
        await store.update_scim_group(ScimGroup("g2", "ML ENGINEERS", None, 2.0, 6.0))

    assert await store.delete_scim_group("g1") == ["usr_ada"]
    assert await store.scim_group("g1") is None
    assert [g.id for g in await store.list_scim_groups()] == ["g2"]
