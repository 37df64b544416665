"""The manual's pages, found from a checkout (docs/) as the console's Manual screen finds them."""

from __future__ import annotations

from pathlib import Path

from llmgw.console.manual import manual_dir, pages

ROOT = Path(__file__).resolve().parents[2]


def test_in_a_checkout_the_manual_is_its_docs_folder_with_each_pages_title():
    folder = manual_dir()

    assert folder == ROOT / "docs"
    listed = dict(pages(folder))
    assert listed["console.md"] == "The console: `sudo llmgw`"
    assert set(listed) == {p.name for p in (ROOT / "docs").glob("*.md")}
