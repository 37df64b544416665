"""The generated pages say what the program does now."""

from __future__ import annotations

from pathlib import Path

from llmgw.cli.docs import render_cli
from llmgw.config.reference import render_reference

ROOT = Path(__file__).resolve().parent.parent


def test_docs_reference_md_is_what_llmgw_docs_reference_writes():
    assert (ROOT / "docs" / "reference.md").read_text() == render_reference(), (
        "docs/reference.md is out of date: run llmgw docs reference")


def test_docs_cli_md_is_what_llmgw_docs_cli_writes():
    assert (ROOT / "docs" / "cli.md").read_text() == render_cli(), "docs/cli.md is out of date: run llmgw docs cli"


def test_the_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("\n\n")[1]
    assert "python3 build.py run" in head and "python3 build.py test" in head
