"""The portal's frame: signing in, the cookie, the security headers, CSRF, roles and ?next=.

In process: the portal mounted on an aiohttp app over a real store (both
dialects), with a page of the test's own that only admins may see. Then
one real `llmgw server`, whose client port serves the portal beside /v1.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from llmgw.account import AccountError, Accounts, Actor
from llmgw.config import ClusterSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.errors import N_
from llmgw.portal import registered
from llmgw.portal.web import Registry, Viewer, render
from llmgw.store import Conflict, StoreError
from tests.portal.portalkit import PASSWORD, csrf_from, portal_app, set_cookies, sign_in
from tests.support.servers import Server, write_config

ROOT = Actor("root", "cli")


async def _admins_only(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return render(request, "error.html", title="Admins only", message="for admins")


async def _note(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    return web.Response(text="noted")


@pytest.fixture
async def people(store):
    accounts = Accounts(store)
    await accounts.people.add(ROOT, email="ada@example.com", name="Ada", role="admin", password=PASSWORD)
    await accounts.people.add(ROOT, email="bob@example.com", name="Bob", password=PASSWORD)
    return accounts.people


def _app(store, settings: ClusterSettings | None = None) -> web.Application:
    pages = registered().copy()
    pages.page("/test/admins-only", role="admin")(_admins_only)
    pages.page("/test/note", methods=("POST",))(_note)
    return portal_app(store, settings, pages=pages)


@pytest.fixture
async def client(store, people):
    async with TestClient(TestServer(_app(store))) as c:
        yield c


async def test_signing_in_sets_a_session_cookie_scripts_cannot_read_and_leads_to_the_page_asked_for(client):
    signed = await sign_in(client, "ada@example.com", next_="/test/admins-only")

    assert signed.status == 303 and signed.headers["Location"] == "/test/admins-only"
    cookie = set_cookies(signed)["llmgw_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["secure"]  # plain HTTP from a browser that is not behind a trusted proxy
    assert cookie.value not in signed.headers["Location"]
    page = await client.get("/test/admins-only")
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"


async def test_each_sign_in_gives_a_new_session_and_ends_the_one_the_browser_had(client):
    csrf = await csrf_from(client)  # the pre-session value, which a signed-in browser still holds
    first = set_cookies(await sign_in(client, "ada@example.com", csrf=csrf))["llmgw_session"].value
    second = set_cookies(await sign_in(client, "ada@example.com", csrf=csrf))["llmgw_session"].value

    assert first != second
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({"llmgw_session": first}, response_url=client.make_url("/"))
    assert (await client.get("/test/admins-only", allow_redirects=False)).status == 303


async def test_a_wrong_password_shows_the_sentence_and_sets_no_session(client):
    csrf = await csrf_from(client)
    answer = await client.post("/signin", data={"_csrf": csrf, "email": "ada@example.com",
                                                "password": "not it at all"}, allow_redirects=False)

    assert answer.status == 401
    assert "that e-mail and password do not match an account here" in await answer.text()
    assert "llmgw_session" not in set_cookies(answer)


async def test_every_page_carries_its_own_csp_nonce_and_never_unsafe_inline(client):
    first = (await client.get("/signin")).headers["Content-Security-Policy"]
    second = (await client.get("/signin")).headers["Content-Security-Policy"]

    nonces = [re.search(r"'nonce-([^']+)'", policy).group(1) for policy in (first, second)]
    assert nonces[0] != nonces[1]
    assert "unsafe-inline" not in first and "unsafe-eval" not in first
    for directive in ("default-src 'self'", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'",
                      "object-src 'none'"):
        assert directive in first
    answer = await client.get("/signin")
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Referrer-Policy"] == "same-origin"


async def test_a_post_without_the_forms_csrf_value_is_refused(client):
    await sign_in(client, "bob@example.com")

    refused = await client.post("/test/note", data={"text": "hi"})
    assert refused.status == 403
    assert "reload the page and try again" in await refused.text()
    page = await (await client.get("/test/admins-only")).text()  # Bob is a member: the 403 page has a form
    token = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    assert (await client.post("/test/note", data={"_csrf": token})).status == 200
    assert (await client.post("/test/note", headers={"X-CSRF-Token": token})).status == 200


async def test_a_form_from_another_site_is_refused_even_with_the_csrf_value(client):
    await sign_in(client, "bob@example.com")
    page = await (await client.get("/test/admins-only")).text()
    token = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)

    answer = await client.post("/test/note", data={"_csrf": token}, headers={"Origin": "https://evil.example"})
    assert answer.status == 403


async def test_signing_in_without_the_pre_session_csrf_cookie_is_refused(client, store):
    answer = await client.post("/signin", data={"_csrf": "made-up", "email": "ada@example.com",
                                                "password": PASSWORD}, allow_redirects=False)

    assert answer.status == 403 and "llmgw_session" not in set_cookies(answer)


async def test_a_member_gets_the_403_page_on_an_admins_page(client):
    await sign_in(client, "bob@example.com")

    answer = await client.get("/test/admins-only")
    assert answer.status == 403
    assert "not for your role" in await answer.text()


async def test_someone_signed_out_is_sent_to_sign_in_and_then_back(client):
    answer = await client.get("/test/admins-only?x=1", allow_redirects=False)

    location = URL(answer.headers["Location"])
    assert answer.status == 303 and location.path == "/signin" and location.query["next"] == "/test/admins-only?x=1"
    signed = await sign_in(client, "ada@example.com", next_="/test/admins-only?x=1")
    assert signed.headers["Location"] == "/test/admins-only?x=1"


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example",
                                    "javascript:alert(1)", "evil"])
async def test_next_never_leads_off_this_site(client, target):
    signed = await sign_in(client, "ada@example.com", next_=target)

    assert signed.status == 303 and signed.headers["Location"] == "/"


async def test_signing_out_ends_the_session_and_says_so_once(client):
    await sign_in(client, "ada@example.com")
    page = await (await client.get("/test/admins-only")).text()
    token = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)

    out = await client.post("/signout", data={"_csrf": token}, allow_redirects=False)
    assert out.status == 303 and out.headers["Location"] == "/signin"
    assert "You are signed out." in await (await client.get("/signin")).text()
    assert "You are signed out." not in await (await client.get("/signin")).text()
    assert (await client.get("/test/admins-only", allow_redirects=False)).status == 303


async def test_the_cookie_is_secure_behind_a_trusted_proxy_that_says_https(store, people):
    settings = ClusterSettings()
    settings = replace(settings, router=replace(settings.router, trusted_proxies=["127.0.0.1/32"]))
    async with TestClient(TestServer(_app(store, settings))) as c:
        page = await c.get("/signin", headers={"X-Forwarded-Proto": "https"})
        csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
        assert set_cookies(page)["llmgw_csrf"]["secure"]
        # The test client keeps Secure cookies away from plain HTTP, as a browser would: send it by hand.
        signed = await c.post("/signin", data={"_csrf": csrf, "email": "ada@example.com", "password": PASSWORD},
                              headers={"X-Forwarded-Proto": "https", "Cookie": f"llmgw_csrf={csrf}"},
                              allow_redirects=False)
    assert signed.status == 303 and set_cookies(signed)["llmgw_session"]["secure"]


async def test_the_stylesheet_is_served_under_its_digest_for_ever(client):
    page = await (await client.get("/signin")).text()
    href = re.search(r'href="(/static/[0-9a-f]+/portal\.css)"', page).group(1)

    answer = await client.get(href)
    assert answer.status == 200 and answer.content_type == "text/css"
    assert "immutable" in answer.headers["Cache-Control"]
    assert (await client.get("/static/0000000000000000/portal.css")).status == 404


@pytest.mark.integration
@pytest.mark.parametrize("workers", [1, 2])
async def test_a_real_server_serves_the_portal_beside_an_unchanged_v1(tmp_path, workers):
    """With workers the portal lives in each worker process, and the main process serves no page."""
    server = Server(tmp_path, "cp1", config=write_config(tmp_path / "server.yaml", {"workers": workers}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    admin = json.loads(done.stdout)["administrator"]
    server.start()
    try:
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(server.client_url, cookie_jar=jar) as http:
            async with http.get("/v1/models") as v1:
                assert v1.status == 401 and (await v1.json())["error"]["code"] == "missing_api_key"
                assert "Content-Security-Policy" not in v1.headers
            async with http.get("/v1/nothing-here", headers={"Authorization": "Bearer x"}) as v1:
                assert v1.status in (401, 404) and v1.content_type == "application/json"
            async with http.get("/signin") as page:
                assert ("x-llmgw-worker" in page.headers) == (workers > 1)
                csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
            async with http.post("/signin", data={"_csrf": csrf, "email": admin["email"],
                                                  "password": admin["password"]}, allow_redirects=False) as signed:
                assert signed.status == 303, await signed.text()
                assert set_cookies(signed)["llmgw_session"]["httponly"]
            async with http.get("/", allow_redirects=False) as home:
                assert home.status == 303 and home.headers["Location"] == "/chat"
    finally:
        server.stop()


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("raised", "status", "said"), [
    (Conflict("that name is taken"), 409, "that name is taken"),
    (StoreError("the store at sqlite:x does not answer"), 503, "does not answer"),
    (AccountError(N_("no key {key}"), 404, params={"key": "key_1"}), 404, "no key key_1"),
    (Refusal("there is no model qwen here", 404), 404, "there is no model qwen here"),
])
async def test_a_refusal_a_page_raises_is_shown_as_a_page_with_its_status(store, people, raised, status, said):
    async def refuses(request, viewer):
        raise raised

    pages = registered().copy()
    pages.page("/test/refuses")(refuses)
    async with TestClient(TestServer(portal_app(store, pages=pages))) as client:
        await sign_in(client, "bob@example.com")
        answer = await client.get("/test/refuses")
        shown = await answer.text()

    assert answer.status == status and said in shown
    assert "Content-Security-Policy" in answer.headers


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_a_bug_in_a_page_is_a_page_that_says_so_and_the_traceback_goes_only_to_the_log(store, people, caplog):
    async def breaks(request, viewer):
        raise KeyError("internal detail 7f3a")

    pages = registered().copy()
    pages.page("/test/breaks")(breaks)
    async with TestClient(TestServer(portal_app(store, pages=pages))) as client:
        await sign_in(client, "bob@example.com")
        answer = await client.get("/test/breaks")
        shown = await answer.text()

    assert answer.status == 500 and "Something went wrong on the gateway" in shown
    assert "7f3a" not in shown and "Traceback" not in shown
    assert "Content-Security-Policy" in answer.headers
    assert any("7f3a" in (r.exc_text or "") for r in caplog.records)


def test_the_nav_keeps_the_order_people_expect_and_shows_each_role_its_own():
    pages = Registry()
    pages.add_nav("main", "/usage", "Usage", "member")
    pages.add_nav("main", "/elsewhere", "Elsewhere", "member")
    pages.add_nav("admin", "/admin/people", "People", "admin")
    pages.add_nav("main", "/chat", "Chat", "member")
    pages.add_nav("main", "/chat", "Chat again", "member")

    assert [item.path for item in pages.nav] == ["/chat", "/usage", "/admin/people", "/elsewhere"]
    with pytest.raises(ValueError):
        pages.add_nav("main", "/x", "X", "owner")


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
async def test_a_member_sees_the_members_nav_and_an_admin_the_admin_row_too(store, people):
    pages = registered().copy()
    pages.add_nav("main", "/test/note", "Notes", "member")
    pages.add_nav("admin", "/test/admins-only", "Admins only", "admin")
    pages.page("/test/admins-only", role="admin")(_admins_only)
    async with TestClient(TestServer(portal_app(store, pages=pages))) as client:
        await sign_in(client, "bob@example.com")
        member = await (await client.get("/profile")).text()
    async with TestClient(TestServer(portal_app(store, pages=pages))) as client:
        await sign_in(client, "ada@example.com")
        admin = await (await client.get("/profile")).text()

    assert 'href="/test/note"' in member and 'href="/test/admins-only"' not in member
    assert 'href="/test/note"' in admin and 'href="/test/admins-only"' in admin
