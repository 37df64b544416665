"""What `llmgw --help` and every command's --help print: no argparse placeholder, no command without a line."""

from __future__ import annotations

import argparse
import subprocess
import sys

from llmgw.cli.main import build_parser


def _every_parser(parser: argparse.ArgumentParser, words: list[str]):
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _every_parser(child, [*words, name])


def test_llmgw_help_shows_no_suppress_placeholder_and_lists_no_internal_command():
    shown = subprocess.run([sys.executable, "-m", "llmgw", "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "==SUPPRESS==" not in shown.stdout
    # The commands llmgw runs itself (an upgrade's watchdog and apply step) are not offered to people.
    assert "upgrade-watchdog" not in shown.stdout and "upgrade-apply" not in shown.stdout
    assert "upgrade " in shown.stdout


def test_no_commands_help_page_shows_a_suppress_placeholder():
    pages = {" ".join(words) or "llmgw": parser.format_help() for words, parser in _every_parser(build_parser(), [])}
    assert len(pages) > 50
    assert [name for name, text in pages.items() if "==SUPPRESS==" in text] == []


def test_the_internal_commands_still_run():
    for command in ("upgrade-watchdog", "upgrade-apply"):
        shown = subprocess.run([sys.executable, "-m", "llmgw", command, "--help"], capture_output=True, text=True,
                               timeout=60)
        assert shown.returncode == 0 and f"usage: llmgw {command}" in shown.stdout
