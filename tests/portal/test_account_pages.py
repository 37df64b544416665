"""One's own account in the portal: the profile (password, language, sessions), signing up, a forced
password change, and the 404 page."""

from __future__ import annotations

from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings
from llmgw.config.server import SignupSettings
from tests.portal.portalkit import PASSWORD, csrf_from, csrf_in, portal_app, set_cookies, sign_in

ROOT = Actor("root", "cli")
NEW = "a brand new passphrase"


@pytest.fixture
async def accounts(store):
    accounts = Accounts(store)
    await accounts.people.add(ROOT, email="bob@example.com", name="Bob", password=PASSWORD)
    return accounts


@pytest.fixture
async def client(store, accounts):
    async with TestClient(TestServer(portal_app(store))) as c:
        yield c


async def _profile_csrf(client) -> str:
    return await csrf_from(client, "/profile")


async def test_changing_ones_password_keeps_this_session_and_ends_the_others(client, store):
    other_browser = TestClient(TestServer(portal_app(store)))
    async with other_browser:
        await sign_in(other_browser, "bob@example.com")
        await sign_in(client, "bob@example.com")
        changed = await client.post("/profile", data={"_csrf": await _profile_csrf(client), "action": "password",
                                                      "current": PASSWORD, "new": NEW, "again": NEW},
                                    allow_redirects=False)

        assert changed.status == 303 and changed.headers["Location"] == "/profile"
        page = await (await client.get("/profile")).text()
        assert "Your password is changed" in page
        assert (await other_browser.get("/profile", allow_redirects=False)).status == 303
    async with TestClient(TestServer(portal_app(store))) as third:
        assert (await sign_in(third, "bob@example.com", password=NEW)).status == 303


async def test_a_wrong_current_password_changes_nothing_and_says_why(client):
    await sign_in(client, "bob@example.com")

    answer = await client.post("/profile", data={"_csrf": await _profile_csrf(client), "action": "password",
                                                 "current": "not my password", "new": NEW, "again": NEW})
    assert answer.status == 403
    assert "that is not your current password" in await answer.text()


async def test_a_chosen_language_beats_the_browsers(client, store):
    await sign_in(client, "bob@example.com")

    await client.post("/profile", data={"_csrf": await _profile_csrf(client), "action": "language",
                                        "locale": "tr"})
    page = await (await client.get("/profile", headers={"Accept-Language": "en-US,en"})).text()
    assert '<html lang="tr">' in page
    assert (await store.person_by_email("bob@example.com")).locale == "tr"


async def test_one_can_end_another_session_of_ones_own_from_the_profile(client, store):
    async with TestClient(TestServer(portal_app(store))) as other:
        await sign_in(other, "bob@example.com")
        await sign_in(client, "bob@example.com")
        page = await (await client.get("/profile")).text()
        assert page.count('name="action" value="end"') == 1  # not this session's own row
        ref = page.split('name="session" value="', 1)[1].split('"', 1)[0]
        person = await store.person_by_email("bob@example.com")
        assert all(ref != s.id for s in await store.list_sessions(person.id))

        await client.post("/profile", data={"_csrf": csrf_in(page), "action": "end", "session": ref})
        assert (await other.get("/profile", allow_redirects=False)).status == 303
        assert (await client.get("/profile", allow_redirects=False)).status == 200


async def test_a_password_set_by_someone_else_must_be_changed_before_anything_else(client, accounts, store):
    _, password = await accounts.people.reset_password(ROOT, "bob@example.com")
    signed = await sign_in(client, "bob@example.com", password=password, next_="/keys")
    assert signed.headers["Location"] == "/keys"

    elsewhere = await client.get("/keys", allow_redirects=False)
    assert elsewhere.status == 303 and elsewhere.headers["Location"] == "/profile"
    page = await (await client.get("/profile")).text()
    assert "choose your own before you go on" in page
    await client.post("/profile", data={"_csrf": csrf_in(page), "action": "password", "current": password,
                                        "new": NEW, "again": NEW})
    assert not (await store.person_by_email("bob@example.com")).must_change_password
    assert (await client.get("/keys", allow_redirects=False)).headers.get("Location") != "/profile"


async def test_signing_up_is_offered_only_when_domains_are_set(client):
    answer = await client.get("/signup")

    assert answer.status == 404 and "Signing up is off here" in await answer.text()
    assert 'href="/signup"' not in await (await client.get("/signin")).text()


async def test_a_person_at_an_open_domain_signs_up_and_is_signed_in(store, accounts):
    settings = ClusterSettings()
    settings = replace(settings, auth=replace(settings.auth, signup=SignupSettings(domains=["example.org"])))
    async with TestClient(TestServer(portal_app(store, settings))) as client:
        assert 'href="/signup"' in await (await client.get("/signin")).text()
        csrf = await csrf_from(client, "/signup")
        outsider = await client.post("/signup", data={"_csrf": csrf, "name": "Eve", "email": "eve@evil.example",
                                                      "password": NEW, "again": NEW}, allow_redirects=False)
        assert outsider.status == 403 and "example.org" in await outsider.text()

        joined = await client.post("/signup", data={"_csrf": csrf, "name": "Cem", "email": "cem@example.org",
                                                    "password": NEW, "again": NEW}, allow_redirects=False)
        assert joined.status == 303 and set_cookies(joined)["llmgw_session"]["httponly"]
        assert "Cem" in await (await client.get("/profile")).text()
    person = await store.person_by_email("cem@example.org")
    assert person.role == "member"
    assert [m.scope for m in await store.memberships(person.id)] == ["project"]


async def test_an_unknown_path_gets_the_portals_404_page_and_v1_is_left_alone(client):
    answer = await client.get("/no/such/page")

    assert answer.status == 404 and answer.content_type == "text/html"
    assert "There is no such page here." in await answer.text()
    assert "Content-Security-Policy" in answer.headers
    v1 = await client.get("/v1/whatever")  # not the portal's: in the client app, /v1's own catch-all answers
    assert v1.status == 404 and "There is no such page here." not in await v1.text()
