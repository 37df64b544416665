"""Single sign-on in headless Chromium: from the portal's "Sign in with Corp" button, through a real OpenID
provider's login page (npm's oidc-provider), to the chat page of a real `llmgw server`; and the role
following a group changed at the provider at the next sign-in."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.oidcprovider import CLIENT_ID, CLIENT_SECRET, OIDCProvider
from tests.support.servers import Server, SimEngine, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium through an OpenID provider


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A server whose single sign-on is the provider; ada is in llmgw-admins there, which gives admin."""
    root = tmp_path_factory.mktemp("sso")
    engine = SimEngine(root, "qwen", "--echo").start()
    server = Server(root, "gw")
    provider = OIDCProvider(root / "op", [server.client_url + "/login/oidc/callback"]).start()
    secret = root / "oidc-client-secret"
    secret.write_text(CLIENT_SECRET + "\n")
    os.chmod(secret, 0o600)
    server.config = write_config(root / "gw.yaml", {
        "models": [{"name": "qwen", "endpoints": [engine.url]}],
        "portal": {"address": server.client_url},  # single sign-on starts only with an address set
        "auth": {"oidc": {"issuer": provider.issuer, "client_id": CLIENT_ID, "client_secret_file": str(secret),
                          "scopes": ["openid", "email", "profile", "groups"], "label": "Corp",
                          "roles": {"admin": ["llmgw-admins"]}, "no_passwords": True}}})
    try:
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.administrator = json.loads(done.stdout)["administrator"]
        server.start()
        server.provider = provider
        yield server
    finally:
        server.stop()
        provider.stop()
        engine.stop()


def sign_in_through_the_provider(page, gateway, login: str) -> None:
    page.goto(gateway.client_url + "/signin?next=/chat")
    page.click("text=Sign in with Corp")
    page.wait_for_url(gateway.provider.issuer + "/**")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password: the provider's test login takes any")
    page.click("button[type=submit]")
    page.wait_for_url(gateway.client_url + "/chat")


def role_on_profile(page, gateway) -> str:
    page.goto(gateway.client_url + "/profile")
    return page.inner_text("main p").rsplit("·", 1)[-1].strip()


def test_the_button_takes_a_person_through_the_providers_login_to_chat_with_the_role_their_groups_give(
        gateway, browsing):
    page = browsing.page
    sign_in_through_the_provider(page, gateway, "ada")

    assert page.url == gateway.client_url + "/chat"
    assert role_on_profile(page, gateway) == "admin"


def test_a_group_taken_away_at_the_provider_takes_the_role_away_at_the_next_sign_in(gateway, browsing):
    page = browsing.page
    sign_in_through_the_provider(page, gateway, "grace")
    assert role_on_profile(page, gateway) == "member"
    gateway.provider.set_groups("grace", ["llmgw-admins"])
    page.context.clear_cookies()
    sign_in_through_the_provider(page, gateway, "grace")
    assert role_on_profile(page, gateway) == "admin"

    gateway.provider.set_groups("grace", ["ml-engineers"])
    page.context.clear_cookies()
    sign_in_through_the_provider(page, gateway, "grace")
    assert role_on_profile(page, gateway) == "member"
    page.goto(gateway.client_url + "/admin/people")
    assert "This page is not for your role" in page.inner_text("main")


def test_with_no_passwords_the_form_is_folded_away_and_refuses_all_but_the_break_glass_administrator(
        gateway, browsing):
    page = browsing.page
    page.goto(gateway.client_url + "/signin")
    assert not page.is_visible("#password")
    page.click("summary")
    page.fill("#email", "grace@corp.example")
    page.fill("#password", "whatever it is")
    page.click("main button[type=submit]")
    assert "passwords are not used here; sign in with the single sign-on button" in page.inner_text("main")
    assert page.url.startswith(gateway.client_url + "/signin")

    page.fill("#email", gateway.administrator["email"])  # admin@localhost, auth.break_glass by default
    page.fill("#password", gateway.administrator["password"])
    page.click("main button[type=submit]")
    page.wait_for_url(gateway.client_url + "/chat")
