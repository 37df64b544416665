"""The portal's frame: signing in, the cookie, the security headers, CSRF, roles and ?next=.

In process: the portal mounted on an aiohttp app over a real store (both
dialects), with a page of the test's own that only admins may see. Then
one real `llmgw server`, whose client port serves the portal beside /v1.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from http.cookies import SimpleCookie
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings
from llmgw.portal import mount, registered
from llmgw.portal.web import Viewer, render
from tests.support.servers import Server

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"


class Plane:
    """What the portal reads of the process serving it, over the test's store."""

    def __init__(self, store, settings: ClusterSettings | None = None):
        self.store = store
        self.settings = SimpleNamespace(current=settings or ClusterSettings())


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
    app = web.Application()
    mount(app, Plane(store, settings), registry=pages)
    return app


@pytest.fixture
async def client(store, people):
    async with TestClient(TestServer(_app(store))) as c:
        yield c


def _set_cookies(response) -> dict[str, SimpleCookie]:
    found = {}
    for header in response.headers.getall("Set-Cookie", []):
        cookie = SimpleCookie()
        cookie.load(header)
        for name in cookie:
            found[name] = cookie[name]
    return found


async def _csrf_from(client, path: str = "/signin") -> str:
    page = await (await client.get(path)).text()
    return re.search(r'name="_csrf" value="([^"]+)"', page).group(1)


async def _sign_in(client, email: str, *, next_: str = "/", csrf: str | None = None) -> aiohttp.ClientResponse:
    csrf = csrf or await _csrf_from(client)
    return await client.post("/signin", data={"_csrf": csrf, "email": email, "password": PASSWORD,
                                              "next": next_}, allow_redirects=False)


async def test_signing_in_sets_a_session_cookie_scripts_cannot_read_and_leads_to_the_page_asked_for(client):
    signed = await _sign_in(client, "ada@example.com", next_="/test/admins-only")

    assert signed.status == 303 and signed.headers["Location"] == "/test/admins-only"
    cookie = _set_cookies(signed)["llmgw_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["secure"]  # plain HTTP from a browser that is not behind a trusted proxy
    assert cookie.value not in signed.headers["Location"]
    page = await client.get("/test/admins-only")
    assert page.status == 200 and page.headers["Cache-Control"] == "no-store"


async def test_each_sign_in_gives_a_new_session_and_ends_the_one_the_browser_had(client):
    csrf = await _csrf_from(client)  # the pre-session value, which a signed-in browser still holds
    first = _set_cookies(await _sign_in(client, "ada@example.com", csrf=csrf))["llmgw_session"].value
    second = _set_cookies(await _sign_in(client, "ada@example.com", csrf=csrf))["llmgw_session"].value

    assert first != second
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({"llmgw_session": first}, response_url=client.make_url("/"))
    assert (await client.get("/test/admins-only", allow_redirects=False)).status == 303


async def test_a_wrong_password_shows_the_sentence_and_sets_no_session(client):
    csrf = await _csrf_from(client)
    answer = await client.post("/signin", data={"_csrf": csrf, "email": "ada@example.com",
                                                "password": "not it at all"}, allow_redirects=False)

    assert answer.status == 401
    assert "that e-mail and password do not match an account here" in await answer.text()
    assert "llmgw_session" not in _set_cookies(answer)


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
    await _sign_in(client, "bob@example.com")

    refused = await client.post("/test/note", data={"text": "hi"})
    assert refused.status == 403
    assert "reload the page and try again" in await refused.text()
    page = await (await client.get("/test/admins-only")).text()  # Bob is a member: the 403 page has a form
    token = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    assert (await client.post("/test/note", data={"_csrf": token})).status == 200
    assert (await client.post("/test/note", headers={"X-CSRF-Token": token})).status == 200


async def test_a_form_from_another_site_is_refused_even_with_the_csrf_value(client):
    await _sign_in(client, "bob@example.com")
    page = await (await client.get("/test/admins-only")).text()
    token = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)

    answer = await client.post("/test/note", data={"_csrf": token}, headers={"Origin": "https://evil.example"})
    assert answer.status == 403


async def test_signing_in_without_the_pre_session_csrf_cookie_is_refused(client, store):
    answer = await client.post("/signin", data={"_csrf": "made-up", "email": "ada@example.com",
                                                "password": PASSWORD}, allow_redirects=False)

    assert answer.status == 403 and "llmgw_session" not in _set_cookies(answer)


async def test_a_member_gets_the_403_page_on_an_admins_page(client):
    await _sign_in(client, "bob@example.com")

    answer = await client.get("/test/admins-only")
    assert answer.status == 403
    assert "not for your role" in await answer.text()


async def test_someone_signed_out_is_sent_to_sign_in_and_then_back(client):
    answer = await client.get("/test/admins-only?x=1", allow_redirects=False)

    location = URL(answer.headers["Location"])
    assert answer.status == 303 and location.path == "/signin" and location.query["next"] == "/test/admins-only?x=1"
    signed = await _sign_in(client, "ada@example.com", next_="/test/admins-only?x=1")
    assert signed.headers["Location"] == "/test/admins-only?x=1"


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example",
                                    "javascript:alert(1)", "evil"])
async def test_next_never_leads_off_this_site(client, target):
    signed = await _sign_in(client, "ada@example.com", next_=target)

    assert signed.status == 303 and signed.headers["Location"] == "/"


async def test_signing_out_ends_the_session_and_says_so_once(client):
    await _sign_in(client, "ada@example.com")
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
        assert _set_cookies(page)["llmgw_csrf"]["secure"]
        # The test client keeps Secure cookies away from plain HTTP, as a browser would: send it by hand.
        signed = await c.post("/signin", data={"_csrf": csrf, "email": "ada@example.com", "password": PASSWORD},
                              headers={"X-Forwarded-Proto": "https", "Cookie": f"llmgw_csrf={csrf}"},
                              allow_redirects=False)
    assert signed.status == 303 and _set_cookies(signed)["llmgw_session"]["secure"]


async def test_the_stylesheet_is_served_under_its_digest_for_ever(client):
    page = await (await client.get("/signin")).text()
    href = re.search(r'href="(/static/[0-9a-f]+/portal\.css)"', page).group(1)

    answer = await client.get(href)
    assert answer.status == 200 and answer.content_type == "text/css"
    assert "immutable" in answer.headers["Cache-Control"]
    assert (await client.get("/static/0000000000000000/portal.css")).status == 404


@pytest.mark.integration
async def test_a_real_server_serves_the_portal_beside_an_unchanged_v1(tmp_path):
    server = Server(tmp_path, "cp1")
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
                csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
            async with http.post("/signin", data={"_csrf": csrf, "email": admin["email"],
                                                  "password": admin["password"]}, allow_redirects=False) as signed:
                assert signed.status == 303, await signed.text()
                assert _set_cookies(signed)["llmgw_session"]["httponly"]
            async with http.get("/", allow_redirects=False) as home:
                assert home.status == 303 and home.headers["Location"] == "/chat"
    finally:
        server.stop()
