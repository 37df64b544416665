"""/install and /docs: the manual of this version, rendered safely, to anyone, in the reader's language where
there is one; and the Markdown it is written in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.manualpages import manual_dir, page_file, pages
from llmgw.portal.markdown import render, slug
from tests.portal.portalkit import portal_app

ROOT = Path(__file__).resolve().parents[2]


async def test_the_install_guide_is_setup_md_with_its_screens_for_anyone_signed_in_or_not(store):
    async with TestClient(TestServer(portal_app(store))) as client:
        answer = await client.get("/install")
        html = await answer.text()

    assert answer.status == 200 and "text/html" in answer.headers["Content-Type"]
    assert "<pre><code> llmgw setup: the parts of an install" in html
    assert '<h2 id="one-machine-or-three">One machine or three</h2>' in html
    assert "[*] Control plane" in html  # a screen as captured, its brackets as they are


async def test_the_manual_lists_every_page_and_each_links_to_the_others(store):
    async with TestClient(TestServer(portal_app(store))) as client:
        index = await (await client.get("/docs")).text()
        operations = await client.get("/docs/operations")
        text = await operations.text()
        picture = await client.get("/docs/img/portal-chat.png")

    assert all(f'href="/docs/{name.removesuffix(".md")}"' in index for name, _ in pages(ROOT / "docs"))
    assert operations.status == 200 and '<h2 id="proxies-in-front">Proxies in front</h2>' in text
    assert '<a href="/docs/observability">observability.md</a>' in text  # a link between pages, of this site
    assert picture.status == 200 and picture.headers["Content-Type"] == "image/png"


@pytest.mark.parametrize("path", ["/docs/..%2Fsetup.cfg", "/docs/no-such-page", "/docs/SETUP", "/docs/setup.md",
                                  "/docs/img/..%2F..%2Fbuild.py", "/docs/img/nothing.png"])
async def test_a_page_that_is_not_there_is_a_404_and_nothing_outside_the_manual_is_read(store, path):
    async with TestClient(TestServer(portal_app(store))) as client:
        answer = await client.get(path)
        html = await answer.text()

    assert answer.status == 404 and "There is no such page" in html
    assert "[metadata]" not in html and "import" not in html


def test_a_translated_page_is_shown_in_the_readers_language_and_the_others_in_english(tmp_path):
    (tmp_path / "tr").mkdir()
    for folder, text in ((tmp_path, "# Setup"), (tmp_path / "tr", "# Kurulum")):
        (folder / "setup.md").write_text(text)
    (tmp_path / "ha.md").write_text("# HA")

    assert page_file(tmp_path, "setup", "tr") == tmp_path / "tr" / "setup.md"
    assert page_file(tmp_path, "setup", "en") == tmp_path / "setup.md"
    assert page_file(tmp_path, "ha", "tr") == tmp_path / "ha.md"
    assert page_file(tmp_path, "../ha", "en") is None and page_file(tmp_path, "tr/setup", "en") is None


def test_markup_in_a_page_is_shown_as_text_and_a_link_goes_nowhere_but_the_manual_or_the_web():
    html = render('<script>alert(1)</script> and `<b>code</b>`\n\n'
                  '[bad](javascript:alert(1)) [up](../setup.cfg) [ha](ha.md#a-floating-address) '
                  '[site](https://example.com/x?a=1&b=2) ![chart](img/portal-usage.png)')

    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<code>&lt;b&gt;code&lt;/b&gt;</code>" in html
    assert "javascript:" not in html and 'href="../' not in html and "bad) up" in html  # the labels as text
    assert '<a href="/docs/ha#a-floating-address">ha</a>' in html
    assert '<a href="https://example.com/x?a=1&amp;b=2">site</a>' in html
    assert '<img src="/docs/img/portal-usage.png" alt="chart">' in html


def test_lists_nest_tables_keep_code_with_bars_and_headings_get_githubs_ids():
    html = render("- one\n- two:\n  - two a\n  - two b\n- three\n\n1. first\n2. second\n\n"
                  "| a | b |\n|---|---|\n| `x \\| y` | **bold** and *it* |\n\n## What `ctl kb` does (and why)\n")

    assert "<ul><li>one</li>\n<li>two:\n<ul><li>two a</li>\n<li>two b</li></ul></li>\n<li>three</li></ul>" in html
    assert "<ol><li>first</li>\n<li>second</li></ol>" in html
    assert "<td><code>x | y</code></td><td><strong>bold</strong> and <em>it</em></td>" in html
    assert '<h2 id="what-ctl-kb-does-and-why">' in html
    assert slug("Running on Patroni: the store's three") == "running-on-patroni-the-stores-three"


def test_every_page_of_the_manual_renders_and_every_link_between_pages_finds_its_page_and_anchor():
    folder = manual_dir()
    assert folder is not None
    ids = {}
    rendered = {}
    for name, _ in pages(folder):
        rendered[name] = html = str(render((folder / name).read_text()))
        ids[name.removesuffix(".md")] = set(re.findall(r'<h\d id="([^"]+)"', html))
    broken = []
    for name, html in rendered.items():
        for page, anchor in re.findall(r'href="/docs/([a-z0-9-]+)(?:#([\w-]+))?"', html):
            if page not in ids or (anchor and anchor not in ids[page]):
                broken.append(f"{name}: /docs/{page}#{anchor}")
    assert not broken, "links between the manual's pages that lead nowhere:\n" + "\n".join(sorted(set(broken)))
