"""The portal on a phone's screen, 390 px wide, in a real Chromium against a real gateway (issue 25, item 17).

At 390 px the header ran off the screen, "Sign out" cut off at its edge, and
the Turkish admin menu broke its labels over two lines. Each page a member or
an administrator reaches from the menus is opened at that width, in English
and Turkish: every link and button of the header and the admin menu must be
on the screen, each label on one line, and no page wider than the phone.
Screenshots of each page's first screenful go where conftest.py says.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.e2e.test_portal_journeys import shot_name

PHONE = {"width": 390, "height": 844}
MENUS = "header.top a, header.top button, nav.admin a"

# Each control of the header and the admin menu: its text, its box, and how many lines its label takes
# (the label's text has a client rect a line it is laid out on, in a link or a button alike).
CONTROLS = """selector => [...document.querySelectorAll(selector)].map(e => {
  const box = e.getBoundingClientRect();
  const label = document.createRange();
  label.selectNodeContents(e);
  const tops = new Set([...label.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
  return {text: e.innerText.trim(), left: box.left, right: box.right, width: box.width,
          lines: tops.size, shown: e.checkVisibility()};
})"""


@pytest.mark.parametrize("locale", ["en-US", "tr-TR"])
@pytest.mark.parametrize("who", ["member", "admin"])
def test_on_a_phone_every_menu_link_is_on_screen_on_one_line_and_no_page_is_wider_than_the_phone(
        gateway, pages, who, locale):
    seen = pages(who, locale=locale)
    page = seen.page
    page.set_viewport_size(PHONE)
    page.goto(gateway.url + ("/admin" if who == "admin" else "/keys"))
    paths = [urlparse(a).path for a in page.eval_on_selector_all("nav a[href^='/']", "ls => ls.map(a => a.href)")]
    assert "/usage" in paths and ("/admin/people" in paths) == (who == "admin")

    for path in dict.fromkeys([*paths, "/profile"]):
        assert page.goto(gateway.url + path).status == 200, path
        seen.page.screenshot(path=str(seen.shots / f"{who}-{locale}-{shot_name(path)}.png"))
        controls = page.evaluate(CONTROLS, MENUS)
        assert {"Sign out", "Çıkış yap"} & {c["text"] for c in controls}, f"{path}: no Sign out"
        for c in controls:
            assert c["shown"] and c["width"] > 0, f"{path}: {c['text']!r} is not shown"
            assert c["left"] >= 0 and c["right"] <= PHONE["width"], f"{path}: {c['text']!r} is off the screen: {c}"
            assert c["lines"] == 1, f"{path}: {c['text']!r} is broken over {c['lines']} lines"
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} is {width} px wide on a {PHONE['width']} px screen"
