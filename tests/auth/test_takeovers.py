"""Nobody takes an account over through a directory (issue 25), tried as the attacker did: against a real
`llmgw server` with two worker processes, npm's oidc-provider signing the ID tokens, and SCIM over HTTP.

Each test uses people of its own, so the one server and provider of this module serve them all.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from types import SimpleNamespace
from urllib.parse import urljoin

import aiohttp
import pytest

from llmgw.auth.scim import make_token
from llmgw.store import open_store
from tests.auth.oidckit import browser, query_of, through_provider
from tests.portal.portalkit import csrf_in
from tests.support.oidcprovider import CLIENT_ID, CLIENT_SECRET, OIDCProvider
from tests.support.servers import Server, llmgw, write_config
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real OpenID provider (node)

PASSWORD = "Correct-horse-battery-9"
SCIM = "application/scim+json"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
# The gateway's workers: every one of them must have read a setting before a test takes it as in force.
WORKERS = 2


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("takeovers")
    server = Server(root, "gw", config=write_config(root / "gw.yaml", {"workers": WORKERS}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    provider = OIDCProvider(root / "op", [server.client_url + "/login/oidc/callback"]).start()
    server.start()
    try:
        kept = llmgw("ctl", "auth", "secret", "set", "oidc-client", "--admin", server.admin,
                     "--token-file", server.token_file, stdin=CLIENT_SECRET + "\n")
        assert kept.returncode == 0, kept.stderr
        assert ctl(server, "config", "set", "portal.address", server.client_url).returncode == 0
        block = root / "oidc.yaml"
        block.write_text(json.dumps({"issuer": provider.issuer, "client_id": CLIENT_ID,
                                     "client_secret_file": "store:auth/oidc-client",
                                     "scopes": ["openid", "email", "profile", "groups"]}))
        kept = ctl(server, "auth", "keep", "oidc", "--file", str(block))
        assert kept.returncode == 0, kept.stdout + kept.stderr
        wait_for_sso(server)
        yield SimpleNamespace(server=server, provider=provider, url=server.client_url,
                              callback=server.client_url + "/login/oidc/callback")
    finally:
        server.stop()
        provider.stop()


def ctl(server: Server, *args: str):
    return server.ctl("ctl", *args)


def wait_for_sso(server: Server) -> None:
    wait_until(lambda: every_worker_answers(server, "/login/oidc", 303), 30, "every worker started single sign-on")


def every_worker_answers(server: Server, path: str, status: int, headers: dict | None = None) -> bool:
    """Whether each of the server's workers, the last time it answered `path`, answered `status`.

    Each worker reads the settings on its own poll, and the kernel hands each connection to either: six
    answers in a row of one status once came all from the worker that had read them, while the other still
    answered as before (CI, a 303 after six 503s). So ask until every worker has answered, by the worker
    header each answer carries."""
    last: dict[str, int] = {}
    for _ in range(60):
        code, worker = _answer(server, path, headers)
        last[worker] = code
        if len(last) == WORKERS and all(c == status for c in last.values()):
            return True
    return False


def _answer(server: Server, path: str, headers: dict | None = None) -> tuple[int, str]:
    """The status `path` is answered with, and the worker (its pid) that answered."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        request = urllib.request.Request(server.client_url + path, headers=headers or {})
        with urllib.request.build_opener(NoRedirect).open(request, timeout=5) as r:
            return r.status, r.headers.get("x-llmgw-worker", "")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("x-llmgw-worker", "")


def add_person(server: Server, email: str, *, role: str = "member", password: str | None = None) -> dict:
    args = ["people", "add", email, "--name", email.split("@")[0].title(), "--role", role, "--json"]
    if password is not None:
        args.append("--password-stdin")
    done = llmgw(*args, "--admin", server.admin, "--token-file", server.token_file,
                 stdin=None if password is None else password + "\n")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def person(server: Server, email: str) -> dict:
    return server.ctl_json("people", "show", email)


def refusal(page: str) -> str:
    found = re.search(r'<p class="error"[^>]*>(.*?)</p>', page, re.S)
    assert found, f"no refusal on this page:\n{page[:3000]}"
    return html.unescape(found.group(1)).strip()


async def signed_in_as(session: aiohttp.ClientSession, gw) -> str | None:
    """Whose session the browser holds now (their e-mail on /profile), None when it holds none."""
    profile = await session.get(gw.url + "/profile", allow_redirects=False)
    if profile.status != 200:
        return None
    found = re.search(r"[\w.+-]+@[\w.-]+", re.sub(r"<[^>]+>", " ", await profile.text()))
    return found.group(0) if found else None


# --- OpenID Connect ------------------------------------------------------------------------------


async def test_an_unverified_email_does_not_take_over_the_break_glass_admin(gw):
    gw.provider.set_user("mallory", email="Admin@Localhost", email_verified=None)

    async with browser() as session:
        answer = await through_provider(session, gw, "mallory")
        page = await answer.text()
        admin_page = await session.get(gw.url + "/admin/people", allow_redirects=False)

        assert answer.status == 409 and "break-glass" in refusal(page)
        assert await signed_in_as(session, gw) is None
        assert admin_page.status != 200
    glass = person(gw.server, "admin@localhost")
    assert (glass["identities"], glass["state"], glass["role"]) == ([], "active", "admin")


async def test_an_unverified_email_does_not_take_over_an_admin_and_the_refusal_says_how_to_link(gw):
    add_person(gw.server, "carol@corp.example", role="admin")
    gw.provider.set_user("carol-at-idp", email="Carol@Corp.Example", email_verified=None)

    async with browser() as session:
        answer = await through_provider(session, gw, "carol-at-idp")
        said = refusal(await answer.text())
        assert answer.status == 409 and await signed_in_as(session, gw) is None
    command = re.search(r"llmgw people link (\S+) (\S+) '([^']+)'", said)
    assert command, said
    assert command.groups() == ("carol@corp.example", "oidc", f"{gw.provider.issuer}#carol-at-idp")
    assert person(gw.server, "carol@corp.example")["identities"] == []

    # The administrator links the two on purpose, with the command the sentence gave.
    linked = gw.server.ctl("people", "link", *command.groups())
    assert linked.returncode == 0, linked.stderr
    async with browser() as session:
        answer = await through_provider(session, gw, "carol-at-idp")
        assert answer.status == 303
        assert await signed_in_as(session, gw) == "carol@corp.example"


async def test_the_admin_people_page_links_an_identity_on_purpose_as_the_command_does(gw):
    add_person(gw.server, "olga@corp.example", role="admin", password=PASSWORD)
    pat = add_person(gw.server, "pat@corp.example")
    gw.provider.set_user("pat-at-idp", email="pat@corp.example", email_verified=None)
    async with browser() as session:
        refused = await through_provider(session, gw, "pat-at-idp")
        assert refused.status == 409
        subject = re.search(r"llmgw people link \S+ oidc '([^']+)'", refusal(await refused.text())).group(1)

        await sign_in_with_password(session, gw, "olga@corp.example")
        page = await (await session.get(gw.url + f"/admin/people/{pat['id']}")).text()
        linked = await session.post(gw.url + f"/admin/people/{pat['id']}/link", allow_redirects=False,
                                    data={"_csrf": csrf_in(page), "source": "oidc", "subject": subject})
        assert linked.status == 303
        shown = html.unescape(await (await session.get(gw.url + linked.headers["Location"])).text())
        assert "The directory's identity is tied to this person." in shown and subject in shown

    async with browser() as session:
        assert (await through_provider(session, gw, "pat-at-idp")).status == 303
        assert await signed_in_as(session, gw) == "pat@corp.example"


async def sign_in_with_password(session: aiohttp.ClientSession, gw, email: str) -> None:
    csrf = csrf_in(await (await session.get(gw.url + "/signin")).text())
    signed = await session.post(gw.url + "/signin", allow_redirects=False, data={
        "_csrf": csrf, "email": email, "password": PASSWORD, "next": "/"})
    assert signed.status == 303, await signed.text()


@pytest.mark.parametrize("said", ["false", "true"])
async def test_email_verified_as_a_string_is_not_a_verified_email(gw, said):
    email = f"dan-{said}@corp.example"
    add_person(gw.server, email)
    gw.provider.set_user(f"dan-{said}", email=email, email_verified=said)

    async with browser() as session:
        answer = await through_provider(session, gw, f"dan-{said}")
        assert answer.status == 409 and "does not vouch" in refusal(await answer.text())
        assert await signed_in_as(session, gw) is None
    assert person(gw.server, email)["identities"] == []


@pytest.mark.parametrize("claim", ["preferred_username", "upn"])
async def test_a_preferred_username_or_upn_that_looks_like_an_email_takes_over_nothing(gw, claim):
    email = f"fay-{claim}@corp.example"
    add_person(gw.server, email)
    gw.provider.set_user(f"fay-{claim}", email=None, email_verified=True, **{claim: email})

    async with browser() as session:
        answer = await through_provider(session, gw, f"fay-{claim}")
        assert answer.status == 409 and "does not vouch" in refusal(await answer.text())
        assert await signed_in_as(session, gw) is None
    assert person(gw.server, email)["identities"] == []


async def test_an_email_the_provider_verifies_with_the_boolean_true_is_tied_to_the_existing_account(gw):
    made = add_person(gw.server, "gus@corp.example")
    gw.provider.set_user("gus-at-idp", email="gus@corp.example", email_verified=True)

    async with browser() as session:
        answer = await through_provider(session, gw, "gus-at-idp")
        assert answer.status == 303
        assert await signed_in_as(session, gw) == "gus@corp.example"
    tied = person(gw.server, "gus@corp.example")
    assert tied["id"] == made["id"]
    assert [(i["source"], i["subject"]) for i in tied["identities"]] == [("oidc", f"{gw.provider.issuer}#gus-at-idp")]


async def test_an_unverified_email_nobody_has_makes_its_own_account(gw):
    gw.provider.set_user("hana", email="hana@corp.example", email_verified=None)

    async with browser() as session:
        answer = await through_provider(session, gw, "hana")
        assert answer.status == 303 and await signed_in_as(session, gw) == "hana@corp.example"
    made = person(gw.server, "hana@corp.example")
    assert (made["role"], made["has_password"]) == ("member", False)


async def test_a_replayed_callback_with_the_same_cookie_state_and_code_is_refused(gw):
    gw.provider.set_user("ivan", email="ivan@corp.example")
    async with browser() as session:
        callback = await to_the_callback(session, gw, "ivan")
        flow_cookie = {c.key: c.value for c in session.cookie_jar}["llmgw_oidc"]
        first = await session.get(callback, allow_redirects=False)
        assert first.status == 303

    # The same cookie, state and code again, several times: each of the two workers sees one or more.
    for _ in range(4):
        async with aiohttp.ClientSession(cookies={"llmgw_oidc": flow_cookie}) as replay:
            again = await replay.get(callback, allow_redirects=False)
            # Refused by the gateway itself, before the provider is asked (which would refuse the reused
            # code with invalid_grant: the gateway must not depend on that).
            assert again.status == 400
            assert refusal(await again.text()) == "This sign-in was used already; sign in again."
            assert "llmgw_session" not in {c.key for c in replay.cookie_jar}


async def to_the_callback(session: aiohttp.ClientSession, gw, login: str) -> str:
    """through_provider, stopping at the callback's address without asking it."""
    url = gw.url + "/login/oidc"
    for _ in range(20):
        if url.startswith(gw.callback):
            return url
        answer = await session.get(url, allow_redirects=False)
        if answer.status in (302, 303):
            url = urljoin(url, answer.headers["Location"])
            continue
        page = await answer.text()
        form = re.search(r'<form[^>]*action="([^"]+)"', page)
        assert answer.status == 200 and form, page[:2000]
        posted = await session.post(urljoin(url, form.group(1)), allow_redirects=False,
                                    data={"prompt": "login", "login": login, "password": "any"})
        url = urljoin(url, posted.headers["Location"])
    raise AssertionError("the sign-in went round in circles")


async def test_a_host_header_never_becomes_the_redirect_address_and_without_an_address_sso_does_not_start(gw):
    async with browser() as session:
        start = await session.get(gw.url + "/login/oidc", headers={"Host": "evil.example"}, allow_redirects=False)
        assert query_of(start.headers["Location"])["redirect_uri"] == gw.callback

    assert ctl(gw.server, "config", "unset", "portal.address").returncode == 0
    try:
        wait_until(lambda: every_worker_answers(gw.server, "/login/oidc", 503), 30,
                   "every worker refused to start single sign-on")
        async with browser() as session:
            start = await session.get(gw.url + "/login/oidc", headers={"Host": "evil.example"},
                                      allow_redirects=False)
            page = await start.text()
            assert start.status == 503 and "Location" not in start.headers
            assert "evil.example" not in page and "portal.address" in refusal(page)

        tried = ctl(gw.server, "auth", "test", "oidc")
        assert tried.returncode == 1
        assert re.search(r"FAIL\s+redirect: .*portal\.address", tried.stdout), tried.stdout

        add_person(gw.server, "root@corp.example", role="admin", password=PASSWORD)
        async with browser() as session:
            await sign_in_with_password(session, gw, "root@corp.example")
            admin_page = await (await session.get(gw.url + "/admin/sign-in")).text()
            assert "none is set; set portal.address" in html.unescape(admin_page)
    finally:
        assert ctl(gw.server, "config", "set", "portal.address", gw.server.client_url).returncode == 0
        wait_for_sso(gw.server)


# --- passwords -----------------------------------------------------------------------------------


async def test_a_suspended_account_gets_the_wrong_passwords_answer_and_is_throttled(gw):
    add_person(gw.server, "jay@corp.example", password=PASSWORD)
    assert gw.server.ctl("people", "suspend", "jay@corp.example").returncode == 0

    async def sign_in(session: aiohttp.ClientSession, password: str) -> tuple[int, str]:
        csrf = csrf_in(await (await session.get(gw.url + "/signin")).text())
        answer = await session.post(gw.url + "/signin", allow_redirects=False, data={
            "_csrf": csrf, "email": "jay@corp.example", "password": password, "next": "/"})
        return answer.status, refusal(await answer.text()) if answer.status != 303 else ""

    async with browser() as session:
        right = await sign_in(session, PASSWORD)
        wrong = await sign_in(session, "Not-the-password-1")
        assert right == wrong and right[0] == 401
        # auth.sign_in_per_account (10) failures in the window, the right password's among them: refused.
        answers = [await sign_in(session, PASSWORD) for _ in range(9)]
        assert answers[-1][0] == 429, answers
        assert answers[7][0] == 401


# --- SCIM ----------------------------------------------------------------------------------------


async def _scim_token(store_address: str) -> str:
    store = await open_store(store_address)
    try:
        return await make_token(store)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def scim(gw):
    token = asyncio.run(_scim_token(gw.server.store))
    assert ctl(gw.server, "config", "set", "auth.scim.enabled", "true").returncode == 0
    assert ctl(gw.server, "config", "set", "auth.scim.roles", '{"admin": ["scim-admins"]}').returncode == 0
    headers = {"Authorization": f"Bearer {token}"}
    wait_until(lambda: every_worker_answers(gw.server, "/scim/v2/ServiceProviderConfig", 200, headers), 30,
               "every worker answers SCIM")
    return headers | {"Content-Type": SCIM}


def scim_user(email: str, **kw) -> dict:
    return {"schemas": [USER], "userName": email, "name": {"formatted": kw.pop("name", "Pushed Name")},
            "emails": [{"value": email, "primary": True}], "active": True} | kw


async def test_scim_cannot_provision_the_break_glass_account(gw, scim):
    before = person(gw.server, "admin@localhost")
    async with aiohttp.ClientSession(gw.url, headers=scim) as http:
        async with http.post("/scim/v2/Users", data=json.dumps(scim_user("admin@localhost", name="Mallory"))) as r:
            body = await r.json()
            assert r.status == 409, body
            assert body["status"] == "409" and "break-glass" in body["detail"]
    after = person(gw.server, "admin@localhost")
    assert (after["name"], after["state"], after["role"], after["identities"]) == (
        before["name"], "active", "admin", [])


async def test_scim_does_not_take_an_existing_account_until_an_administrator_links_its_username(gw, scim):
    made = add_person(gw.server, "kim@corp.example")
    async with aiohttp.ClientSession(gw.url, headers=scim) as http:
        async with http.post("/scim/v2/Users", data=json.dumps(scim_user("kim@corp.example"))) as r:
            body = await r.json()
            assert r.status == 409 and "llmgw people link kim@corp.example scim 'kim@corp.example'" in body["detail"]
        assert person(gw.server, "kim@corp.example")["identities"] == []

        assert gw.server.ctl("people", "link", "kim@corp.example", "scim", "kim@corp.example").returncode == 0
        async with http.post("/scim/v2/Users", data=json.dumps(scim_user("kim@corp.example"))) as r:
            assert r.status == 201, await r.text()
    tied = person(gw.server, "kim@corp.example")
    assert tied["id"] == made["id"] and [i["source"] for i in tied["identities"]] == ["scim"]


async def test_scim_cannot_suspend_the_last_active_admin(gw, scim):
    async with aiohttp.ClientSession(gw.url, headers=scim) as http:
        async with http.post("/scim/v2/Users", data=json.dumps(scim_user("lea@corp.example"))) as r:
            assert r.status == 201, await r.text()
            lea = await r.json()
        async with http.post("/scim/v2/Groups", data=json.dumps({
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "scim-admins",
                "members": [{"value": lea["id"]}]})) as r:
            assert r.status == 201, await r.text()
        assert person(gw.server, "lea@corp.example")["role"] == "admin"

        # Every other admin suspended by hand (allowed: lea is still an active admin).
        listed = gw.server.ctl_json("people", "list")
        listed = listed if isinstance(listed, list) else listed.get("people", listed.get("data", []))
        others = [p["email"] for p in listed
                  if p["role"] == "admin" and p["state"] == "active" and p["email"] != "lea@corp.example"]
        for email in others:
            assert gw.server.ctl("people", "suspend", email).returncode == 0
        try:
            async with http.patch(f"/scim/v2/Users/{lea['id']}", data=json.dumps({
                    "schemas": [PATCH], "Operations": [{"op": "replace", "path": "active", "value": False}]})) as r:
                body = await r.json()
                assert r.status == 409, body
                assert "last active admin" in body["detail"]
            async with http.delete(f"/scim/v2/Users/{lea['id']}") as r:
                assert r.status == 409
            async with http.get(f"/scim/v2/Users/{lea['id']}") as r:
                assert (await r.json())["active"] is True
        finally:
            for email in others:
                gw.server.ctl("people", "suspend", email, "--lift")
    assert person(gw.server, "lea@corp.example")["state"] == "active"
