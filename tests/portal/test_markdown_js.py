"""The chat's Markdown (llmgw/portal/static/markdown.js) in a real Chromium: what it makes of an answer.

A model's answer is text from outside the gateway. These tests feed markdown.js hostile and ordinary
answers and read back the elements it built. The chat page itself is tested in test_chat_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import llmgw.portal

pytestmark = pytest.mark.slow  # a real Chromium

MARKDOWN_JS = Path(llmgw.portal.__path__[0]) / "static" / "markdown.js"

# Renders an answer into #out and says what came of it, as plain data.
RENDER = """(text) => {
  const out = document.getElementById("out");
  out.replaceChildren(window.LlmgwMarkdown.render(text, document, {copy: "Copy", copied: "Copied"}));
  const tags = [...out.querySelectorAll("*")].map((e) => e.tagName.toLowerCase());
  const links = [...out.querySelectorAll("a")].map((a) => [a.getAttribute("href"), a.rel, a.textContent]);
  const attributes = [...out.querySelectorAll("*")].flatMap((e) => [...e.attributes].map((a) => a.name));
  return {tags, links, attributes, text: out.textContent, html: out.innerHTML};
}"""


@pytest.fixture
def render(browsing):
    page = browsing.page
    page.set_content("<!doctype html><html><body><div id='out'></div></body></html>")
    page.add_script_tag(path=str(MARKDOWN_JS))
    return lambda text: page.evaluate(RENDER, text)


def test_raw_html_an_onerror_image_and_script_links_stay_text_and_run_nothing(render, browsing):
    hostile = ('<img src=x onerror="window.pwned=1"> and <script>window.pwned=2</script>\n\n'
               '[click me](javascript:window.pwned=3) [data](data:text/html,<b>x</b>) '
               '[spaced]( javascript:alert(1) ) <a href="javascript:alert(1)">raw</a>')

    got = render(hostile)

    assert set(got["tags"]) <= {"p", "br"}
    assert got["links"] == [] and not [a for a in got["attributes"] if a.startswith("on")]
    assert '<img src=x onerror="window.pwned=1">' in got["text"]
    assert "<script>window.pwned=2</script>" in got["text"]
    assert "[click me](javascript:window.pwned=3)" in got["text"]
    assert browsing.page.evaluate("window.pwned") is None


def test_paragraphs_emphasis_code_spans_and_lists_become_their_elements(render):
    got = render("Hello **bold** and *soft* and `a < b`.\nA second line.\n\n"
                 "- one\n- two with __strong__\n\n3. three\n4. four\n\nsnake_case_name stays as it is")

    assert got["tags"] == ["p", "strong", "em", "code", "br", "ul", "li", "li", "strong", "ol", "li", "li", "p"]
    assert "a < b" in got["text"] and "snake_case_name stays as it is" in got["text"]
    assert '<ol start="3">' in got["html"]


def test_http_links_open_without_referrer_or_opener_and_others_are_left_as_words(render):
    got = render("See [the docs](https://example.com/a?b=1) or http://example.org/x. Not ftp://example.net.")

    assert got["links"] == [
        ["https://example.com/a?b=1", "noopener noreferrer nofollow", "the docs"],
        ["http://example.org/x", "noopener noreferrer nofollow", "http://example.org/x"],
    ]
    assert "ftp://example.net" in got["text"]


def test_fenced_code_keeps_its_text_exactly_with_a_copy_button_even_while_still_streaming(render):
    closed = render("Look:\n\n```python\nif a < b:\n    print('<b>')\n```\nAfter.")
    streaming = render("```js\nconst x = 1;\n")

    assert closed["tags"] == ["p", "div", "button", "pre", "code", "p"]
    assert "if a < b:\n    print('<b>')" in closed["text"]
    assert streaming["tags"] == ["div", "button", "pre", "code"] and "const x = 1;" in streaming["text"]
