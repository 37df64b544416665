"""What people do in the portal, in a real Chromium against a real gateway (tests/e2e/conftest.py).

Sync tests only: playwright's sync API and pytest-asyncio's loop do not mix
in one module (tests/support/browser.py). The chat's own journeys (an answer
that grows, Stop, Markdown safety) are in tests/portal, with the chat page.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from urllib.parse import urlparse

import openai
import pytest

from llmgw.portal import i18n
from tests.e2e.conftest import MODEL, PROJECT, ROOT

ASK = [{"role": "user", "content": "Say something."}]
# What docs/portal.md shows, each taken at this size so the page reads at a glance and the file stays small.
DOCS_IMAGES = {"signin", "profile", "chat", "keys", "key-made", "usage", "connect", "admin", "admin-people",
               "admin-tree", "admin-keys", "admin-audit", "admin-settings", "admin-models", "admin-nodes",
               "admin-guardrails", "admin-usage"}
DOCS_VIEWPORT = {"width": 1100, "height": 720}


def until(page, shown, *, timeout: float = 20.0) -> None:
    """Reloads the page until shown(page) is true: usage reaches the pages when its batch is written."""
    deadline = time.monotonic() + timeout
    while not shown(page):
        assert time.monotonic() < deadline, f"{page.url} did not show it in {timeout:g} s:\n{page.inner_text('main')}"
        page.wait_for_timeout(200)
        page.reload()


def make_key(page, url: str, name: str) -> str:
    """Makes a key on /keys in the one project offered; its secret as the answering page shows it once."""
    page.goto(url + "/keys")
    page.fill("input[name=name]", name)
    page.select_option("select[name=project]", label=PROJECT)
    with page.expect_navigation() as answer:
        page.click("form[action='/keys'] button[type=submit]")
    assert answer.value.status == 201, page.inner_text("main")
    return page.inner_text("#secret")


def test_a_key_made_on_the_keys_page_answers_through_the_sdk_and_its_request_shows_on_usage(gateway, pages):
    page = pages("member").page
    secret = make_key(page, gateway.url, "laptop")
    client = openai.OpenAI(api_key=secret, base_url=gateway.url + "/v1", max_retries=0)

    answer = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10)

    assert answer.choices[0].message.content
    cost = i18n.money("en", answer.usage.completion_tokens * 1000)  # PRICE: 1,000 micro-units a token
    page.goto(gateway.url + "/usage")
    until(page, lambda p: p.inner_text("table.by-model tfoot td >> nth=0") == "1")
    total = page.locator("table.by-model tfoot td").all_inner_texts()
    assert total[0] == "1" and total[-1] == cost
    assert page.inner_text("table.by-model tbody th") == MODEL
    bars = page.locator("svg.chart rect.bar")
    assert bars.count() == 1 and MODEL in bars.first.text_content()


def test_a_member_is_refused_the_admin_pages_with_403(gateway, pages):
    seen = pages("member")

    answer = seen.page.goto(gateway.url + "/admin")

    assert answer.status == 403
    assert seen.page.inner_text("h1") == "Something is in the way"
    assert seen.page.locator("nav.admin").count() == 0  # nor is a member shown the admin row
    seen.screenshot("admin-403")


def test_a_team_made_with_a_budget_on_the_tree_page_refuses_its_key_with_402_past_it(gateway, pages):
    page = pages("admin").page
    page.goto(gateway.url + "/admin/tree")
    for kind, path, budget in (("org", "Thrift", ""), ("team", "Thrift/ml", "0.02"), ("project", "Thrift/ml/app", "")):
        page.select_option("#kind", kind)
        page.fill("#path", path)
        page.fill("#budget", budget)
        page.select_option("#period", "day")
        with page.expect_navigation():
            page.click("form[action='/admin/tree'] button[type=submit]")
        assert path.rsplit("/", 1)[-1] in page.inner_text("main")
    key = gateway.server.ctl_json("keys", "create", "ci", "--project", "Thrift/ml/app", "--create")["key"]
    client = openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)

    for _ in range(2):  # 0.01 each: the budget holds two
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10)

    assert refused.value.status_code == 402 and refused.value.body["code"] == "budget_exceeded"
    assert "the team Thrift/ml" in refused.value.body["message"]


def test_a_form_posted_without_its_csrf_value_is_refused_with_403_and_makes_nothing(gateway, pages):
    seen = pages("member")
    page = seen.page
    page.goto(gateway.url + "/keys")
    page.evaluate("document.querySelector(\"form[action='/keys'] input[name=_csrf]\").remove()")
    page.fill("input[name=name]", "forged")

    with page.expect_navigation() as answer:
        page.click("form[action='/keys'] button[type=submit]")

    assert answer.value.status == 403
    assert page.inner_text("h1") == "Something is in the way"
    seen.screenshot("csrf-403")
    page.goto(gateway.url + "/keys")
    assert "forged" not in page.inner_text("main")


def test_a_turkish_browser_sees_the_usage_page_in_turkish_with_turkish_figures(gateway, pages):
    # No portal page shows a percentage yet (the budget meters are bars with no figure), so the Turkish
    # figures checked are the usage page's: a decimal comma ("0,01"), where English writes "0.01".
    page = pages("member", locale="tr-TR").page

    page.goto(gateway.url + "/usage")

    assert page.inner_text("h1") == "Kullanım"
    assert page.inner_text("nav.main a[href='/keys']") == "Anahtarlar"
    spend = page.locator("table.by-model tfoot td").all_inner_texts()[-1]
    assert re.fullmatch(r"\d+,\d{2,6}", spend), spend


def shot_name(path: str) -> str:
    return path.strip("/").replace("/", "-") or "home"


def test_every_page_a_member_or_an_admin_sees_is_shown_and_saved_as_a_screenshot(gateway, pages):
    docs = os.environ.get("LLMGW_E2E_DOCS_IMG") == "1"
    signed_out = pages()
    signed_out.page.goto(gateway.url + "/signin")
    signed_out.screenshot("signin")
    member = pages("member")
    member.page.goto(gateway.url + "/keys")
    member_paths = [urlparse(a).path for a in member.page.eval_on_selector_all(
        "nav a[href^='/']", "links => links.map(a => a.href)")]
    admin = pages("admin")
    admin.page.goto(gateway.url + "/admin")
    admin_paths = [urlparse(a).path for a in admin.page.eval_on_selector_all(
        "nav.admin a[href^='/']", "links => links.map(a => a.href)")]
    assert {"/keys", "/usage", "/connect"} <= set(member_paths) and "/admin/people" in admin_paths

    for seen, paths in ((member, [*member_paths, "/profile"]), (admin, ["/admin", *admin_paths])):
        for path in dict.fromkeys(paths):
            shown = seen.page.goto(gateway.url + path)
            assert shown.status == 200, f"{path}: {shown.status}"
            assert seen.page.inner_text("h1").strip(), path
            seen.screenshot(shot_name(path))
            if docs and shot_name(path) in DOCS_IMAGES:
                docs_image(seen, shot_name(path))
    # Pages reached from a list rather than the nav: one person, one team's limits.
    for listing, link, name in (("/admin/people", "main a[href^='/admin/people/']", "admin-person"),
                                ("/admin/tree", "main a[href^='/admin/tree/team/']", "admin-tree-team")):
        admin.page.goto(gateway.url + listing)
        shown = admin.page.goto(gateway.url + admin.page.locator(link).first.get_attribute("href"))
        assert shown.status == 200 and admin.page.inner_text("h1").strip(), listing
        admin.screenshot(name)
    if docs:
        docs_image(signed_out, "signin")
        make_key(member.page, gateway.url, "for the picture")
        docs_image(member, "key-made")


def docs_image(seen, name: str) -> Path:
    """The page's first screenful as docs/img/portal-NAME.png, which docs/portal.md shows."""
    path = ROOT / "docs" / "img" / f"portal-{name}.png"
    path.parent.mkdir(exist_ok=True)
    seen.page.set_viewport_size(DOCS_VIEWPORT)
    seen.page.screenshot(path=str(path))
    assert path.stat().st_size < 150_000, f"{path} is {path.stat().st_size} bytes; docs images stay under 150 KB"
    return path


def test_signing_in_through_the_form_leads_to_the_page_asked_for(gateway, pages):
    seen = pages()
    page = seen.page
    page.goto(gateway.url + "/usage")
    assert "/signin?next=" in page.url

    page.fill("#email", gateway.member["email"])
    page.fill("#password", gateway.member["password"])
    with page.expect_navigation():
        page.click("button[type=submit]")

    assert urlparse(page.url).path == "/usage" and page.inner_text("h1") == "Usage"


def test_an_mcp_server_added_through_the_admin_form_is_listed_and_its_tools_shown_when_tested(gateway, pages):
    seen = pages("admin")
    page = seen.page
    page.goto(gateway.url + "/admin/mcp")
    page.fill("#mcp-name", "cluster")
    page.fill("#mcp-url", "llmgw:admin")
    page.fill("#mcp-description", "This cluster's own tools")
    page.fill("#mcp-secret-header", "X-Api-Token")
    page.fill("#mcp-secret-value", "e2e-secret-7d41")

    with page.expect_navigation() as answer:
        page.click("form[action='/admin/mcp/add'] button[type=submit]")

    assert answer.value.status == 200
    assert page.inner_text("p.notice") == "The MCP server cluster was added."
    row = page.inner_text("#mcp-cluster")
    assert "This cluster's own tools" in row and "llmgw:admin" in row and "X-Api-Token" in row
    assert "e2e-secret-7d41" not in page.content()
    with page.expect_navigation():
        page.click("form[action='/admin/mcp/cluster/test'] button[type=submit]")
    assert "cluster.cluster_status" in page.inner_text("#tested")
    seen.screenshot("admin-mcp-tested")
