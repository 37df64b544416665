"""The tenancy tree's names: ORG/TEAM/PROJECT, as people type them."""

from __future__ import annotations

import re

from llmgw.errors import N_, ExpectedError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TreeError(ExpectedError, ValueError):
    """A path or name a person typed that cannot name a place in the tree."""


def check_name(kind: str, name: str) -> str:
    if not _NAME_RE.match(name):
        raise TreeError(
            N_('"{name}" cannot name a {kind}: use 1-64 letters, digits, ".", "_" or "-", '
               "starting with a letter or digit"),
            params={"name": name, "kind": kind},
        )
    return name


def parse_project_path(path: str) -> tuple[str, str, str]:
    """Split "Demo/dev/app" into its org, team and project names."""
    parts = path.split("/")
    if len(parts) != 3:
        raise TreeError(
            N_('"{path}" is not a project path: write ORG/TEAM/PROJECT, for example Demo/dev/app'),
            params={"path": path},
        )
    org, team, project = parts
    return check_name("org", org), check_name("team", team), check_name("project", project)
