"""A real Chromium signs in to a real `llmgw server`'s portal with no Content-Security-Policy violation.

Sync tests only (tests/support/browser.py: playwright's sync API and
pytest-asyncio's loop do not mix in one module).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.servers import Server

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real Chromium


@pytest.fixture
def portal(tmp_path) -> Iterator[tuple[Server, dict]]:
    """A started server and its first administrator's e-mail and password."""
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    try:
        yield server, json.loads(done.stdout)["administrator"]
    finally:
        server.stop()


def test_signing_in_through_the_browser_reaches_the_page_asked_for(portal, browsing):
    server, admin = portal
    page = browsing.page

    shown = page.goto(server.client_url + "/profile")  # signed out: sent to sign in, then back here
    assert shown.status == 200 and "/signin?next=" in page.url
    assert page.inner_text("h1") == "Sign in"
    browsing.screenshot("signin")
    page.fill("#email", admin["email"])
    page.fill("#password", admin["password"])
    page.click("button[type=submit]")
    page.wait_for_url(server.client_url + "/profile")

    assert page.inner_text("h1") == "Your profile"
    assert admin["email"] in page.inner_text("body")
    browsing.screenshot("profile")
    browsing.flush()  # any securitypolicyviolation so far fails the test at teardown


def test_a_wrong_password_is_said_on_the_page_without_a_violation(portal, browsing):
    server, admin = portal
    page = browsing.page

    page.goto(server.client_url + "/signin")
    page.fill("#email", admin["email"])
    page.fill("#password", "not the password at all")
    page.click("button[type=submit]")

    assert "do not match an account here" in page.inner_text("[role=alert]")
    browsing.flush()
