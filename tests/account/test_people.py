"""People as the admin API, the CLI and the portal change them: roles, suspension, passwords, places."""

from __future__ import annotations

import pytest

from llmgw.account import AccountError, Accounts, Actor, check_password
from llmgw.config import SignupSettings
from llmgw.store import Session

ROOT = Actor("root", "cli")


@pytest.fixture
def accounts(store) -> Accounts:
    return Accounts(store)


async def a_session(store, person_id: str, n: int) -> Session:
    s = Session(id=f"{n:064x}", person_id=person_id, created_at=1.0, last_seen_at=1.0, expires_at=9e9,
                chat_digest=bytes([n]) * 32)
    await store.add_session(s)
    return s


async def test_a_person_added_without_a_password_gets_one_shown_once_to_change_at_first_sign_in(accounts, store):
    view, password = await accounts.people.add(ROOT, email="ada@example.com", name="Ada")

    assert password is not None and len(password) == 20
    assert view["role"] == "member" and view["must_change_password"] is True
    assert "password_hash" not in view and password not in str(view)
    stored = await store.person_by_email("ada@example.com")
    assert stored is not None and check_password(password, stored.password_hash)
    [entry] = await store.list_audit(target=f"person:{view['id']}")
    assert (entry.actor, entry.action) == ("root", "person.create")
    assert password not in str(entry.after)


async def test_a_person_added_with_a_password_keeps_it_and_joins_the_places_named(accounts, store):
    await store.ensure_project("Acme", "Research", "search")
    view, made = await accounts.people.add(ROOT, email="bob@example.com", name="Bob", role="operator",
                                           password="correct horse", member_of=["team:Acme/Research"])

    assert made is None and view["must_change_password"] is False
    assert view["member_of"] == ["team:Acme/Research"]


async def test_weak_passwords_unknown_roles_and_places_are_refused_with_sentences(accounts):
    people = accounts.people
    with pytest.raises(AccountError, match="a password needs at least 10 characters"):
        await people.add(ROOT, email="c@example.com", name="C", password="short")
    with pytest.raises(AccountError, match="a password may not be your e-mail address"):
        await people.add(ROOT, email="carol@example.com", name="C", password="Carol@Example.com")
    with pytest.raises(AccountError, match='"owner" is not a role; roles are admin, operator, member'):
        await people.add(ROOT, email="c@example.com", name="C", role="owner")
    with pytest.raises(AccountError, match="there is no team Acme/Nowhere; make it first") as missing:
        await people.add(ROOT, email="c@example.com", name="C", member_of=["team:Acme/Nowhere"])
    assert missing.value.status == 404
    assert missing.value.template == "there is no {scope} {path}; make it first"
    assert missing.value.params == {"scope": "team", "path": "Acme/Nowhere"}
    with pytest.raises(AccountError, match='"ada" is not an e-mail address'):
        await people.add(ROOT, email="ada", name="Ada")


async def test_a_taken_email_is_refused_as_a_conflict(accounts):
    await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")
    with pytest.raises(AccountError, match="ADA@example.com already belongs to someone here") as taken:
        await accounts.people.add(ROOT, email="ADA@example.com", name="Ada 2", password="correct horse")
    assert taken.value.status == 409


async def test_a_role_change_is_audited_and_the_last_admin_cannot_step_down(accounts, store):
    admin, _ = await accounts.people.add(ROOT, email="root@example.com", name="Root", role="admin",
                                         password="correct horse")
    with pytest.raises(AccountError, match="root@example.com is the last active admin"):
        await accounts.people.set_role(ROOT, "root@example.com", "member")

    await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")
    assert (await accounts.people.set_role(ROOT, "ada@example.com", "admin"))["role"] == "admin"
    assert (await accounts.people.set_role(ROOT, admin["id"], "member"))["role"] == "member"
    changes = [e for e in await store.list_audit() if e.action == "person.role"]
    assert [(e.before["role"], e.after["role"]) for e in changes] == [("admin", "member"), ("member", "admin")]


async def test_suspending_a_person_ends_every_session_and_lifting_it_lets_them_back(accounts, store):
    await accounts.people.add(ROOT, email="root@example.com", name="Root", role="admin", password="correct horse")
    view, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")
    await a_session(store, view["id"], 1)
    await a_session(store, view["id"], 2)

    assert (await accounts.people.suspend(ROOT, "ada@example.com"))["state"] == "suspended"
    assert await store.list_sessions(view["id"]) == []
    assert (await accounts.people.suspend(ROOT, "ada@example.com", lift=True))["state"] == "active"
    with pytest.raises(AccountError, match="root@example.com is the last active admin"):
        await accounts.people.suspend(ROOT, "root@example.com")


async def test_a_reset_password_is_returned_once_must_be_changed_and_ends_every_session(accounts, store):
    view, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")
    await a_session(store, view["id"], 1)

    after, password = await accounts.people.reset_password(ROOT, "ada@example.com")

    assert after["must_change_password"] is True
    assert await store.list_sessions(view["id"]) == []
    stored = await store.person_by_id(view["id"])
    assert stored is not None and check_password(password, stored.password_hash)
    assert password not in str([(e.before, e.after) for e in await store.list_audit()])


async def test_changing_ones_own_password_needs_the_old_one_and_ends_the_other_sessions(accounts, store):
    view, made = await accounts.people.add(ROOT, email="ada@example.com", name="Ada")
    assert made is not None
    here = await a_session(store, view["id"], 1)
    await a_session(store, view["id"], 2)
    ada = Actor("ada@example.com", "portal")

    with pytest.raises(AccountError, match="that is not your current password"):
        await accounts.people.change_password(ada, view["id"], "wrong guess!", "a new passphrase")
    await accounts.people.change_password(ada, view["id"], made, "a new passphrase", keep_session=here.id)

    stored = await store.person_by_id(view["id"])
    assert stored is not None and not stored.must_change_password
    assert check_password("a new passphrase", stored.password_hash)
    assert [s.id for s in await store.list_sessions(view["id"])] == [here.id]


async def test_a_team_membership_covers_its_projects_and_no_others(accounts, store):
    search = await store.ensure_project("Acme", "Research", "search")
    ranking = await store.ensure_project("Acme", "Research", "ranking")
    billing = await store.ensure_project("Acme", "Finance", "billing")
    view, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")

    await accounts.people.join(ROOT, "ada@example.com", "team:Acme/Research")

    assert [str(p) for p in await accounts.people.projects_of(view["id"])] == [str(ranking), str(search)]
    assert await accounts.people.may_use_project(view["id"], search.project.id)
    assert not await accounts.people.may_use_project(view["id"], billing.project.id)

    await accounts.people.join(ROOT, "ada@example.com", "org:Acme")
    assert len(await accounts.people.projects_of(view["id"])) == 3
    shown = await accounts.people.leave(ROOT, view["id"], "org:Acme")
    assert shown["member_of"] == ["team:Acme/Research"]
    assert not await accounts.people.may_use_project(view["id"], billing.project.id)


async def test_sign_up_is_refused_outside_the_allowed_domains(accounts):
    with pytest.raises(AccountError, match="signing up is off here"):
        await accounts.people.sign_up(email="ada@example.com", name="Ada", password="correct horse",
                                      signup=SignupSettings())
    with pytest.raises(AccountError, match="signing up is open only to e-mail addresses at example.com") as no:
        await accounts.people.sign_up(email="eve@evil.test", name="Eve", password="correct horse",
                                      signup=SignupSettings(domains=["example.com"]))
    assert no.value.status == 403


async def test_a_person_who_signs_up_is_a_member_of_the_sign_up_project(accounts, store):
    person = await accounts.people.sign_up(email="Ada@Example.com", name="Ada", password="correct horse",
                                           signup=SignupSettings(domains=["example.com"], project="Acme/all/chat"))

    assert person.role == "member" and not person.must_change_password
    assert [str(p) for p in await accounts.people.projects_of(person.id)] == ["Acme/all/chat"]
    [entry] = await store.list_audit(target=f"person:{person.id}")
    assert (entry.actor, entry.via, entry.action) == ("Ada@Example.com", "portal", "person.signup")


async def test_a_person_picks_a_language_the_portal_has(accounts, store):
    view, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password="correct horse")
    await accounts.people.set_locale(view["id"], "tr")
    assert (await accounts.people.show("ada@example.com"))["locale"] == "tr"
    with pytest.raises(AccountError, match="\"de\" is not one of the portal's languages"):
        await accounts.people.set_locale(view["id"], "de")
    with pytest.raises(AccountError, match="no person usr_nobody is known here") as unknown:
        await accounts.people.show("usr_nobody")
    assert unknown.value.status == 404
