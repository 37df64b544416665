"""Single sign-on through a real OpenID provider (npm's oidc-provider on loopback), the portal in process.

The browser here is an aiohttp session with a cookie jar that logs in on the provider's own page;
test_oidc_browser.py drives the same in Chromium against a real `llmgw server`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmgw.account import Accounts, Actor
from tests.auth.oidckit import Gateway, browser, cluster, oidc_settings, query_of, secret_file, through_provider
from tests.portal.portalkit import PASSWORD, set_cookies, sign_in
from tests.support.oidcprovider import OIDCProvider

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real OpenID provider (node)


@pytest.fixture
async def gateway(store, tmp_path):
    await store.ensure_project("Acme", "ml", "search")
    gateway = Gateway(store, tmp_path / "gw")
    provider = OIDCProvider(tmp_path / "op", [gateway.callback]).start()
    gateway.provider = provider
    gateway.use(cluster(oidc_settings(provider.issuer, tmp_path)))
    await gateway.start()
    yield gateway
    await gateway.close()
    provider.stop()


async def test_signing_in_through_the_provider_makes_the_account_with_its_groups_role_and_places(gateway, store):
    async with browser() as session:
        answer = await through_provider(gateway=gateway, session=session, login="ada",
                                        start="/login/oidc?next=/keys")
        assert (answer.status, answer.headers["Location"]) == (303, "/keys")
        assert "llmgw_session" in set_cookies(answer)
        profile = await session.get(gateway.url + "/profile", allow_redirects=False)
        assert profile.status == 200 and "ada@corp.example" in await profile.text()

    person = await store.person_by_email("ada@corp.example")
    assert (person.name, person.role, person.password_hash) == ("Ada Lovelace", "admin", None)
    assert [(m.scope, m.given_by) for m in await store.memberships(person.id)] == [("team", "oidc")]


async def test_a_changed_group_at_the_provider_moves_the_role_at_the_next_sign_in(gateway, store):
    await Accounts(store).people.add(Actor("root", "cli"), email="root@corp.example", name="Root",
                                     password=PASSWORD, role="admin")  # not the last admin: ada may be demoted
    async with browser() as session:
        await through_provider(session, gateway, "ada")
    gateway.provider.set_groups("ada", ["ml-engineers"])
    async with browser() as session:
        answer = await through_provider(session, gateway, "ada")
        assert answer.status == 303

    person = await store.person_by_email("ada@corp.example")
    assert person.role == "member"


async def test_a_callback_without_the_flows_cookie_is_refused_with_a_sentence(gateway):
    async with browser() as session:
        start = await session.get(gateway.url + "/login/oidc", allow_redirects=False)
        state = query_of(start.headers["Location"])["state"]
    async with browser() as other:
        answer = await other.get(gateway.callback + f"?code=stolen&state={state}", allow_redirects=False)
        page = await answer.text()
    assert answer.status == 400
    assert "This sign-in has expired or was started in another browser or tab" in page


async def test_a_state_that_is_not_the_flows_is_refused(gateway):
    async with browser() as session:
        await session.get(gateway.url + "/login/oidc", allow_redirects=False)
        answer = await session.get(gateway.callback + "?code=x&state=forged", allow_redirects=False)
        assert answer.status == 400
        assert "sign in again" in await answer.text()


async def test_the_provider_declining_is_said_on_the_sign_in_page_without_its_own_text(gateway):
    async with browser() as session:
        answer = await session.get(gateway.callback + "?error=access_denied&error_description=Call+0800+now",
                                   allow_redirects=False)
        page = await answer.text()
    assert answer.status == 403
    assert "The sign-in was declined at the provider" in page and "0800" not in page


async def test_an_unknown_person_is_refused_when_accounts_are_not_made_at_sign_in(gateway, store, tmp_path):
    gateway.use(cluster(oidc_settings(gateway.provider.issuer, tmp_path, create_accounts=False)))
    async with browser() as session:
        answer = await through_provider(session, gateway, "grace", start="/login/oidc?next=/keys")
        page = await answer.text()
    assert answer.status == 403
    assert "grace@corp.example has no account here" in page
    assert 'href="/login/oidc?next=/keys"' in page  # the next try still goes where they were going
    assert await store.person_by_email("grace@corp.example") is None


async def test_a_wrong_client_secret_is_refused_with_a_sentence_not_a_traceback(gateway, tmp_path):
    (tmp_path / "wrong").mkdir()
    wrong = secret_file(tmp_path / "wrong", "not-the-secret")
    gateway.use(cluster(oidc_settings(gateway.provider.issuer, tmp_path, client_secret_file=wrong)))
    async with browser() as session:
        answer = await through_provider(session, gateway, "ada")
        page = await answer.text()
    assert answer.status == 502
    assert "the provider refused this gateway&#39;s client id or secret (invalid_client)" in page


async def test_the_sign_in_page_offers_the_provider_and_folds_passwords_away_without_them(gateway, tmp_path):
    gateway.use(cluster(oidc_settings(gateway.provider.issuer, tmp_path, no_passwords=True)))
    async with browser() as session:
        page = await (await session.get(gateway.url + "/signin?next=/keys")).text()
    assert "Sign in with Corp" in page and 'href="/login/oidc?next=/keys"' in page
    assert "<details>" in page


async def test_no_passwords_refuses_a_password_but_lets_the_break_glass_administrator_in(gateway, store, tmp_path):
    people = Accounts(store).people
    await people.add(Actor("root", "cli"), email="admin@localhost", name="Root", password=PASSWORD, role="admin")
    await people.add(Actor("root", "cli"), email="bob@corp.example", name="Bob", password=PASSWORD)
    gateway.use(cluster(oidc_settings(gateway.provider.issuer, tmp_path, no_passwords=True),
                        break_glass="admin@localhost"))
    async with browser() as session:
        refused = await sign_in(_Client(session, gateway.url), "bob@corp.example")
        assert refused.status == 403
        assert "passwords are not used here; sign in with the single sign-on button" in await refused.text()
        wrong = await sign_in(_Client(session, gateway.url), "bob@corp.example", password="wrong")
        assert wrong.status == 403  # the same answer: the password was never looked at
    async with browser() as session:
        allowed = await sign_in(_Client(session, gateway.url), "admin@localhost")
        assert allowed.status == 303
    assert await store.sign_in_failures("account:bob@corp.example", 0) == 0


class _Client:
    """portalkit's sign_in takes a TestClient; this is the same over a session and a base URL."""

    def __init__(self, session, base: str):
        self.session, self.base = session, base

    async def get(self, path: str, **kw):
        return await self.session.get(self.base + path, **kw)

    async def post(self, path: str, **kw):
        return await self.session.post(self.base + path, **kw)


async def test_the_redirect_address_is_the_settings_else_the_portals_address_never_the_browsers(gateway, tmp_path):
    async def redirect_uri() -> str:
        async with browser() as session:
            start = await session.get(gateway.url + "/login/oidc", allow_redirects=False,
                                      headers={"Host": "evil.example"})
            return query_of(start.headers["Location"])["redirect_uri"]

    assert await redirect_uri() == gateway.callback
    settings = cluster(oidc_settings(gateway.provider.issuer, tmp_path))
    gateway.use(replace(settings, portal=replace(settings.portal, address="https://llm.corp.example/")))
    assert await redirect_uri() == "https://llm.corp.example/login/oidc/callback"
    gateway.use(cluster(oidc_settings(gateway.provider.issuer, tmp_path,
                                      redirect_url="https://sso-back.corp.example/login/oidc/callback")))
    assert await redirect_uri() == "https://sso-back.corp.example/login/oidc/callback"
