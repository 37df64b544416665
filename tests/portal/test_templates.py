"""The portal's templates hold nothing the Content-Security-Policy would block, and mark nothing safe
that a person could have written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "llmgw" / "portal" / "templates"
FILES = sorted(TEMPLATES.rglob("*.html"))
# |safe only on Markup the code built (a chart's <svg>, charts.bars): named so in the template.
SAFE_NAMES = re.compile(r"\b\w*(chart|svg)\w*\s*\|\s*safe\b")


def _name(path: Path) -> str:
    return str(path.relative_to(TEMPLATES))


def test_there_are_templates_to_check():
    assert {"base.html", "signin.html", "error.html"} <= {_name(p) for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_no_inline_style_attribute(path):
    assert not re.search(r"<[^>]*\sstyle\s*=", path.read_text(), re.I), \
        "the CSP blocks style= attributes: use a class in static/portal.css"


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_no_inline_event_handler(path):
    found = re.findall(r"<[^>]*\s(on[a-z]+)\s*=", path.read_text(), re.I)

    assert not found, f"the CSP blocks {found}: add a listener in a static/*.js file (data- attributes)"


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_no_javascript_urls(path):
    assert "javascript:" not in path.read_text().lower()


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_safe_only_on_markup_the_code_built(path):
    text = path.read_text()
    uses = re.findall(r"[\w.]+\s*\|\s*safe\b", text)

    assert all(SAFE_NAMES.search(use) for use in uses), (
        f"|safe on {uses}: autoescaping is what keeps a person's text from becoming HTML; only a chart's "
        "Markup (a name with chart or svg in it) may be marked safe")


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_an_inline_script_carries_the_nonce(path):
    for tag in re.findall(r"<script\b[^>]*>", path.read_text(), re.I):
        assert "src=" in tag or 'nonce="{{ nonce }}"' in tag, f"{tag}: give it nonce=\"{{{{ nonce }}}}\" or a src"
