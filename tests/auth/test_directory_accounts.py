"""Accounts a directory vouches for: tied to its id, tied by an e-mail it vouches for, moved with groups, suspended
by it; never the break-glass account, never the last active admin."""

from __future__ import annotations

import pytest

from llmgw.account import AccountError, Accounts, Actor
from llmgw.auth import DirectoryAccounts, GroupMap, Vouched

ROOT = Actor("root", "cli")
SYNC = Actor("directory", "ldap")
GMAP = GroupMap(roles={"admin": ["llmgw-admins"], "operator": ["llmgw-ops"]},
                memberships={"ml-engineers": "team:Acme/ml", "CN=search,OU=Groups,DC=corp": "project:Acme/ml/search"})


@pytest.fixture
async def directory(store) -> DirectoryAccounts:
    await store.ensure_project("Acme", "ml", "search")
    accounts = Accounts(store)
    return DirectoryAccounts(store, accounts.people, accounts.audit, break_glass=lambda: "admin@localhost")


def ada(groups: set[str] | None = None, **kw) -> Vouched:
    base = dict(source="ldap", subject="guid-ada", email="ada@corp.example", name="Ada Lovelace",
                groups=None if groups is None else frozenset(groups))
    return Vouched(**(base | kw))


async def test_a_first_sign_in_makes_an_account_without_a_password_with_the_groups_role_and_places(directory, store):
    person = await directory.account(ada({"LLMGW-OPS", "ml-engineers"}), GMAP, create=True, actor=SYNC)

    assert (person.email, person.role, person.password_hash) == ("ada@corp.example", "operator", None)
    [m] = await store.memberships(person.id)
    assert (m.scope, m.given_by) == ("team", "ldap")
    assert [i.subject for i in await store.identities_of(person.id)] == ["guid-ada"]


async def test_a_renamed_person_is_the_same_account_by_the_directory_id(directory, store):
    first = await directory.account(ada(set()), GMAP, create=True, actor=SYNC)
    again = await directory.account(ada(set(), email="ada.king@corp.example", name="Ada King"), GMAP,
                                    create=True, actor=SYNC)

    assert again.id == first.id and (again.email, again.name) == ("ada.king@corp.example", "Ada King")
    assert await store.count_people() == 1


async def test_an_existing_account_with_a_mail_the_directory_vouches_for_is_tied_and_keeps_its_hand_given_places(
        directory, store):
    view, _ = await directory.people.add(ROOT, email="Ada@corp.example", name="Ada",
                                         member_of=["project:Acme/ml/search"])

    person = await directory.account(ada({"ml-engineers"}, email_verified=True), GMAP, create=True, actor=SYNC)
    assert person.id == view["id"]
    await directory.follow(person, ada(set()), GMAP, actor=SYNC)

    left = await store.memberships(person.id)
    assert [(m.scope, m.given_by) for m in left] == [("project", None)]


async def test_leaving_a_group_takes_away_only_the_place_it_gave_and_the_role_falls_to_member(directory, store):
    person = await directory.account(ada({"llmgw-admins", "ml-engineers", "cn=search,ou=groups,dc=corp"}), GMAP,
                                     create=True, actor=SYNC)
    await directory.people.add(ROOT, email="root@corp.example", name="Root", role="admin")
    assert person.role == "admin" and len(await store.memberships(person.id)) == 2

    person = await directory.follow(person, ada({"ml-engineers"}), GMAP, actor=SYNC)

    assert person.role == "member"
    assert [m.scope for m in await store.memberships(person.id)] == ["team"]


async def test_groups_the_directory_did_not_say_leave_role_and_places_as_they_were(directory, store):
    person = await directory.account(ada({"llmgw-admins", "ml-engineers"}), GMAP, create=True, actor=SYNC)

    person = await directory.follow(person, ada(None), GMAP, actor=SYNC)

    assert person.role == "admin" and len(await store.memberships(person.id)) == 1


async def test_without_account_making_a_stranger_is_refused_with_a_sentence(directory):
    with pytest.raises(AccountError, match="has no account here") as e:
        await directory.account(ada(set()), GMAP, create=False, actor=SYNC)
    assert e.value.status == 403


async def test_a_directory_reinstates_only_its_own_suspension(directory, store):
    person = await directory.account(ada(set()), GMAP, create=True, actor=SYNC)
    assert await directory.suspend(person, "ldap", actor=SYNC, why="disabled in the directory")
    person = await store.person_by_id(person.id)
    with pytest.raises(AccountError, match="suspended"):
        await directory.account(ada(set()), GMAP, create=True, actor=SYNC)
    assert await directory.reinstate(person, "ldap", actor=SYNC)

    await directory.people.add(ROOT, email="root@corp.example", name="Root", role="admin")
    await directory.people.suspend(ROOT, person.id)
    by_hand = await store.person_by_id(person.id)
    assert by_hand.suspended_by == "admin"
    assert not await directory.reinstate(by_hand, "ldap", actor=SYNC)
    assert (await store.person_by_id(person.id)).disabled


async def test_a_mail_the_directory_does_not_vouch_for_is_refused_with_how_to_link_and_the_link_then_ties_it(
        directory, store):
    view, _ = await directory.people.add(ROOT, email="ada@corp.example", name="Ada")

    with pytest.raises(AccountError) as refused:
        await directory.account(ada({"llmgw-admins"}), GMAP, create=True, actor=SYNC)
    assert refused.value.status == 409
    assert "llmgw people link ada@corp.example ldap 'guid-ada'" in str(refused.value)
    assert await store.identities_of(view["id"]) == [] and await store.count_people() == 1

    await directory.link(ROOT, "ada@corp.example", "ldap", "guid-ada")
    person = await directory.account(ada(set()), GMAP, create=True, actor=SYNC)
    assert person.id == view["id"]


async def test_the_break_glass_account_is_never_tied_renamed_or_suspended_by_a_directory(directory, store):
    view, _ = await directory.people.add(ROOT, email="admin@localhost", name="Break glass", role="admin")
    await directory.people.add(ROOT, email="bea@corp.example", name="Bea", role="admin")

    for vouched in (ada(email="Admin@Localhost", email_verified=True), ada(email="admin@localhost")):
        with pytest.raises(AccountError) as refused:
            await directory.account(vouched, GMAP, create=True, actor=SYNC)
        assert refused.value.status == 409 and "break-glass" in str(refused.value)
    with pytest.raises(AccountError):
        await directory.link(ROOT, "admin@localhost", "ldap", "guid-ada")
    glass = await directory.people.person("admin@localhost")
    with pytest.raises(AccountError):
        await directory.suspend(glass, "ldap", actor=SYNC, why="gone")
    assert await directory.follow(glass, ada({"ml-engineers"}, email="x@corp.example"), GMAP, actor=SYNC) == glass
    after = await store.person_by_id(view["id"])
    assert (after.email, after.role, after.disabled) == ("admin@localhost", "admin", False)
    assert await store.identities_of(view["id"]) == []


async def test_a_directory_cannot_suspend_the_last_active_admin(directory, store):
    person = await directory.account(ada({"llmgw-admins"}), GMAP, create=True, actor=SYNC)
    assert person.role == "admin"  # no other admin here: ada is the only one

    with pytest.raises(AccountError) as refused:
        await directory.suspend(person, "ldap", actor=SYNC, why="disabled in the directory")

    assert refused.value.status == 409 and "last active admin" in str(refused.value)
    assert not (await store.person_by_id(person.id)).disabled
