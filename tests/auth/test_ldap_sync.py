"""The directory sync against a real slapd: suspends, reinstates, moves roles, and refuses to empty the gateway."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmgw.account import Accounts, Actor
from llmgw.auth import DirectoryAccounts, GroupMap, ldap
from llmgw.auth.ldapsync import LdapSync
from llmgw.config import ClusterSettings
from llmgw.store import Session
from tests.auth.ldapkit import bind_file, file_secrets, settings_for, start_slapd

pytestmark = pytest.mark.slow  # a real slapd

ROOT = Actor("root", "cli")
SIGN_IN = Actor("test", "ldap")


@pytest.fixture
def slapd(tmp_path):
    server = start_slapd(tmp_path / "slapd")
    server.add_person("carol", "Carol Shaw", "carol-password-1")
    server.join("llmgw-users", server.person_dn("carol"))
    yield server
    server.destroy()


class World:
    def __init__(self, store, slapd, tmp_path):
        self.store = store
        self.slapd = slapd
        self.ldap = settings_for(slapd, bind_file(tmp_path))
        self.secrets = file_secrets(tmp_path)
        accounts = Accounts(store)
        self.directory = DirectoryAccounts(store, accounts.people, accounts.audit,
                                           break_glass=lambda: "admin@localhost")
        self.forgotten: list[str] = []
        self.sync = LdapSync(store, lambda: replace(ClusterSettings().auth, ldap=self.ldap), self.secrets,
                             self.directory, leading=lambda: True,
                             on_suspended=lambda p: self.forgotten.append(p.email))

    async def signed_in(self, uid: str):
        vouched = await ldap.sign_in(self.ldap, self.secrets, uid, f"{uid}-password-1")
        return await self.directory.account(vouched, GroupMap(self.ldap.roles, self.ldap.memberships), create=True,
                                            actor=SIGN_IN)

    async def person(self, email: str):
        return await self.store.person_by_email(email)


@pytest.fixture
async def world(store, slapd, tmp_path):
    # Someone else is an admin, so the directory may take ada's role away (the last admin is kept).
    await Accounts(store).people.add(ROOT, email="root@corp.example", name="Root", role="admin")
    w = World(store, slapd, tmp_path)
    for uid in ("ada", "bob", "carol"):
        await w.signed_in(uid)
    return w


async def test_a_person_disabled_in_the_directory_is_suspended_by_the_next_sync_and_their_sessions_end(world, store):
    bob = await world.person("bob@corp.example")
    await store.add_session(Session(id="s-bob", person_id=bob.id, created_at=1.0, last_seen_at=1.0,
                                    expires_at=4e9, chat_digest=b"x" * 32))
    world.slapd.lock("bob")

    report = await world.sync.run_once(ROOT)

    assert (report["checked"], report["suspended"], report["refused"]) == (3, ["bob@corp.example"], None)
    bob = await world.person("bob@corp.example")
    assert (bob.disabled, bob.suspended_by) == (True, "ldap")
    assert await store.list_sessions(bob.id) == []
    assert world.forgotten == ["bob@corp.example"]
    assert world.sync.last == report


async def test_a_person_gone_from_the_directory_is_suspended(world):
    world.slapd.delete(world.slapd.person_dn("carol"))

    report = await world.sync.run_once(ROOT)

    assert report["suspended"] == ["carol@corp.example"]
    assert (await world.person("carol@corp.example")).disabled


async def test_a_person_enabled_again_is_reinstated_but_one_suspended_by_hand_stays(world):
    world.slapd.lock("bob")
    await world.sync.run_once(ROOT)
    carol = await world.person("carol@corp.example")
    await world.directory.people.suspend(ROOT, carol.id)
    world.slapd.unlock("bob")

    report = await world.sync.run_once(ROOT)

    assert report["reinstated"] == ["bob@corp.example"]
    assert not (await world.person("bob@corp.example")).disabled
    assert (await world.person("carol@corp.example")).disabled


async def test_a_sync_that_would_suspend_more_than_half_is_refused_and_changes_nothing(world):
    world.slapd.lock("bob")
    world.slapd.lock("carol")

    report = await world.sync.run_once(ROOT)

    assert report["suspended"] == [] and "it would suspend 2 of the 3 accounts" in report["refused"]
    assert not any([(await world.person(f"{u}@corp.example")).disabled for u in ("ada", "bob", "carol")])


async def test_a_directory_that_cannot_be_read_is_never_taken_for_an_empty_one(world):
    world.ldap = replace(world.ldap, bind_dn="cn=nobody,dc=corp,dc=example")

    report = await world.sync.run_once(ROOT)

    assert report["refused"].startswith("the directory could not be read: the directory refused the service account")
    assert not (await world.person("ada@corp.example")).disabled


async def test_a_nested_group_gives_the_admin_role_and_leaving_it_takes_the_role_away_at_the_sync(world):
    assert (await world.person("ada@corp.example")).role == "admin"  # via platform, inside llmgw-admins
    assert (await world.person("bob@corp.example")).role == "member"
    world.slapd.modify(world.slapd.group_dn("platform"), member=[world.slapd.person_dn("bob")])

    report = await world.sync.run_once(ROOT)

    assert sorted(report["changed"]) == ["ada@corp.example", "bob@corp.example"]
    assert (await world.person("ada@corp.example")).role == "member"
    assert (await world.person("bob@corp.example")).role == "admin"


async def test_a_renamed_person_is_the_same_account_at_sign_in_and_at_the_sync(world, store):
    before = await world.person("bob@corp.example")
    world.slapd.modify(world.slapd.person_dn("bob"), mail=["robert@corp.example"], cn=["Robert Babbage"])

    report = await world.sync.run_once(ROOT)
    after = await world.signed_in("bob")

    assert report["changed"] == ["robert@corp.example"]
    assert (after.id, after.email, after.name) == (before.id, "robert@corp.example", "Robert Babbage")
    assert await store.count_people() == 4


async def test_the_sync_runs_by_itself_on_the_leader_only(world):
    import asyncio

    leading = False
    world.ldap = replace(world.ldap, sync_interval=type(world.ldap.sync_interval)("1s"))
    sync = LdapSync(world.store, lambda: replace(ClusterSettings().auth, ldap=world.ldap), world.secrets,
                    world.directory, leading=lambda: leading)
    sync.start()
    try:
        await asyncio.sleep(0)  # the loop's first turn sees a follower
        assert sync.last is None
        leading = True
        for _ in range(200):  # polled with a bound: the loop looks at leadership every IDLE_CHECK_S
            if sync.last is not None:
                break
            await asyncio.sleep(0.05)
        assert sync.last is not None and sync.last["checked"] == 3
    finally:
        await sync.stop()
