"""The admin pages as an org's administrator uses them, in a real Chromium against a real `llmgw server`
(issue 31): the tenants' pages in the nav and nothing else, only Acme in them, the role form hidden, and a token
for the command line made on the profile page and shown once. Every test also fails on a Content-Security-Policy
violation (tests/support/browser.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.servers import Server, llmgw

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium

PASSWORD = "a long and unguessable phrase 31"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A control plane with Acme (Tara administers it, Cy is of its ml team) and Beta (Bob)."""
    server = Server(tmp_path_factory.mktemp("tenants"), "gw")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    try:
        for kind, path in (("org", "Acme"), ("team", "Acme/ml"), ("org", "Beta"), ("team", "Beta/ops")):
            assert server.ctl("ctl", "tree", "add", kind, path).returncode == 0
        for email, place in (("tara@acme.example", "org:Acme"), ("cy@acme.example", "team:Acme/ml"),
                             ("bob@beta.example", "team:Beta/ops")):
            added = llmgw("people", "add", email, "--name", email.split("@")[0].title(), "--member-of", place,
                          "--password-stdin", "--admin", server.admin, "--token-file", server.token_file,
                          stdin=PASSWORD + "\n")
            assert added.returncode == 0, added.stderr
        assert server.ctl("people", "admin", "tara@acme.example", "org:Acme").returncode == 0
        yield server
    finally:
        server.stop()


@pytest.fixture
def tara(gateway, browsing):
    page = browsing.page
    page.goto(gateway.client_url + "/signin?next=/admin")
    page.fill("#email", "tara@acme.example")
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url("**/admin")
    return page


def test_an_orgs_administrator_finds_the_tenants_pages_and_only_acme_in_them(tara):
    links = tara.locator("nav a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert {"/admin/people", "/admin/tree", "/admin/keys", "/admin/usage", "/admin/audit"} <= set(links)
    assert not {"/admin/models", "/admin/nodes", "/admin/settings", "/admin/sign-in", "/admin/mcp"} & set(links)
    tara.click("nav a[href='/admin/people']")
    people = tara.inner_text("main")
    assert "cy@acme.example" in people and "bob@beta.example" not in people
    tara.click("main a:text-is('Cy')")
    tara.wait_for_url("**/admin/people/usr_*")
    person = tara.inner_text("main")
    assert "Administrator of" in person and "Change the role" not in person and "Link a directory" not in person
    tara.goto(tara.url.split("/admin")[0] + "/admin/tree")
    assert "Beta" not in tara.inner_text("main")


def test_a_token_for_the_command_line_is_made_on_the_profile_and_shown_once(tara):
    tara.goto(tara.url.split("/admin")[0] + "/profile")
    tara.click("text=Make a token")
    shown = tara.inner_text("pre.secret")
    assert re.fullmatch(r"llmgw-pat-[0-9A-Za-z]{43}", shown.strip())
    tara.reload()
    again = tara.inner_text("main")
    assert shown.strip() not in again and shown.strip()[:16] + "…" in again
