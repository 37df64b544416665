"""The portal with JavaScript off: every page but the chat reads, and keys are made and revoked with plain forms.

The chat needs JavaScript (it streams the answer with fetch); no other page
does. Sync tests only (tests/support/browser.py).
"""

from __future__ import annotations

from urllib.parse import urlparse

from tests.e2e.conftest import PROJECT


def nav_paths(page, which: str) -> list[str]:
    """The local links of the nav `which` (main or admin), in their order, read from the page as served."""
    return [urlparse(a.get_attribute("href")).path for a in page.locator(f"nav.{which} a[href^='/']").all()]


def test_with_javascript_off_every_page_but_the_chat_answers_200_with_its_heading(gateway, pages):
    member = pages("member", javascript=False).page
    member.goto(gateway.url + "/keys")
    admin = pages("admin", javascript=False).page
    admin.goto(gateway.url + "/admin")
    walks = ((member, [*nav_paths(member, "main"), "/profile"]),
             (admin, [*nav_paths(admin, "main"), "/admin", *nav_paths(admin, "admin")]))
    assert {"/keys", "/usage", "/connect", "/admin/people", "/admin/tree"} <= {p for _, ps in walks for p in ps}

    for listing, link in (("/admin/people", "main a[href^='/admin/people/']"),
                          ("/admin/tree", "main a[href^='/admin/tree/team/']")):  # reached from a list
        admin.goto(gateway.url + listing)
        walks[1][1].append(admin.locator(link).first.get_attribute("href"))

    for page, paths in walks:
        for path in dict.fromkeys(paths):
            if path == "/chat":
                continue
            shown = page.goto(gateway.url + path)
            assert shown.status == 200, f"{path}: {shown.status}"
            assert page.inner_text("h1").strip(), f"{path} has no heading"


def test_with_javascript_off_a_key_is_made_and_revoked_with_plain_forms(gateway, pages):
    page = pages("member", javascript=False).page
    page.goto(gateway.url + "/keys")
    page.fill("input[name=name]", "no script")
    page.select_option("select[name=project]", label=PROJECT)
    with page.expect_navigation() as made:
        page.click("form[action='/keys'] button[type=submit]")
    assert made.value.status == 201
    assert page.inner_text("#secret").startswith("sk-")

    page.goto(gateway.url + "/keys")
    row = page.locator("table.keys tbody tr", has_text="no script")
    assert row.locator("td").nth(6).inner_text().strip() == "active"
    with page.expect_navigation() as revoked:  # no confirm dialog without JavaScript: the form is sent at once
        row.locator("button", has_text="Revoke").click()

    assert urlparse(page.url).path == "/keys" and revoked.value.status == 200
    row = page.locator("table.keys tbody tr", has_text="no script")
    assert row.locator("td").nth(6).inner_text().strip() == "revoked"
    assert row.locator("button", has_text="Revoke").count() == 0
