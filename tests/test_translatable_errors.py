"""Every refusal a person can read in the portal is raised translatable: an N_() literal and its params.

A refusal raised from an f-string would reach a Turkish reader in English with
no warning; this test turns such a raise into a failure naming its line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import llmgw

ROOT = Path(llmgw.__file__).parent
# The class, and which positional argument is its message.
MESSAGE_ARG = {"AccountError": 0, "Refusal": 0, "SettingsError": 0, "Invalid": 1}
PLACES = ["account", "control/catalog", "control/settings.py", "config"]
# Variables that hold a msgid already, and who made it one.
MSGID_VARIABLES = {"weakness": "account.passwords.check_password_strength returns an N_() literal"}


def _files() -> list[Path]:
    found: list[Path] = []
    for place in PLACES:
        path = ROOT / place
        found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return found


def _called(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _literal(message: ast.expr) -> bool:
    """N_("literal"), or one of two by a condition (a sentence for one thing and one for several)."""
    if isinstance(message, ast.IfExp):
        return _literal(message.body) and _literal(message.orelse)
    return (isinstance(message, ast.Call) and _called(message) == "N_" and len(message.args) == 1
            and isinstance(message.args[0], ast.Constant) and isinstance(message.args[0].value, str))


def _translatable(node: ast.Call, index: int) -> bool:
    """An N_() literal, or a re-raise of another refusal's own template (`e.template, params=…`)."""
    message = node.args[index] if len(node.args) > index else None
    if message is None:
        return False
    if _literal(message):
        return True
    if isinstance(message, ast.Name) and message.id in MSGID_VARIABLES:
        return True
    return (isinstance(message, ast.Attribute) and message.attr == "template"
            and any(k.arg == "params" for k in node.keywords))


def _offenders() -> list[str]:
    said = []
    for path in _files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            name = _called(node) if isinstance(node, ast.Call) else None
            if isinstance(node, ast.Call) and name in MESSAGE_ARG and not _translatable(node, MESSAGE_ARG[name]):
                said.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)[:100]}")
    return said


def test_every_refusal_in_account_catalog_settings_and_config_is_raised_with_an_n_literal():
    assert _offenders() == []


def test_the_check_finds_the_places_it_looks_in():
    # A renamed folder would leave the test above passing over nothing.
    names = {str(p.relative_to(ROOT)) for p in _files()}
    assert {"account/people.py", "control/catalog/changes.py", "control/settings.py", "config/server.py"} <= names
