"""`llmgw ctl tree`: the orgs, teams and projects, with each level's own limits; `tree add` makes one."""

from __future__ import annotations

import argparse
from typing import Any

from llmgw.cli.ctl import client
from llmgw.cli.keys import _limits_text
from llmgw.cli.output import emit_json, table
from llmgw.control import AdminError

KINDS = ("org", "team", "project")


def register(sub, common) -> None:
    tree = sub.add_parser("tree", parents=[common], help="the orgs, teams and projects, with their limits",
                          description="Without an action, shows every org, team and project and the limits "
                                      "set on each (llmgw keys limits changes them).")
    tree.set_defaults(run=run_tree)
    actions = tree.add_subparsers(dest="tree_command", metavar="ACTION")
    add = actions.add_parser("add", parents=[_shared_without_defaults()], help="make an org, a team or a project",
                             description="Make one place in the tree; its parent must exist. Limit flags set "
                                         "its limits as llmgw keys limits would, once it is made.")
    add.add_argument("kind", choices=KINDS)
    add.add_argument("path", help="ORG, ORG/TEAM or ORG/TEAM/PROJECT")
    add.add_argument("--budget", help="money per --period, e.g. 25.00")
    add.add_argument("--period", choices=["day", "month"], help="the budget's period (default month)")
    add.add_argument("--rpm", type=_count, help="requests a minute")
    add.add_argument("--tpm", type=_count, help="tokens a minute")
    add.set_defaults(run=run_add)


def _shared_without_defaults() -> argparse.ArgumentParser:
    """The shared flags (--admin, --token-file, --json) with no defaults of their own.

    `ctl tree --json add …`: argparse copies a sub-command's defaults over what
    the command before it parsed, so `add` must not bring defaults, and tree's
    stand. A parser of its own: parents share their action objects, so
    changing `common`'s would change every command's.
    """
    from llmgw.cli.main import admin_options

    shared = admin_options()
    for action in shared._actions:
        action.default = argparse.SUPPRESS
    return shared


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected zero or more, got {value}")
    return value


def run_tree(args) -> int:
    orgs = client(args).tree()
    if args.json:
        emit_json(orgs)
        return 0
    rows: list[tuple[str, str, str]] = []
    for org in orgs:
        rows.append((org["name"], org["id"], limits_text(org["limits"])))
        for team in org["teams"]:
            rows.append((f"  {team['path']}", team["id"], limits_text(team["limits"])))
            for project in team["projects"]:
                rows.append((f"    {project['path']}", project["id"], limits_text(project["limits"])))
    if not rows:
        print("the tree is empty: llmgw ctl tree add org NAME makes an org")
        return 0
    table(["place", "id", "limits"], rows)
    return 0


def run_add(args) -> int:
    if args.period is not None and args.budget is None:
        raise AdminError("--period goes with --budget: say how much money a period, like --budget 25.00")
    api = client(args)
    made = api.tree_add(args.kind, args.path)
    given: dict[str, Any] = {name: getattr(args, name) for name in ("budget", "period", "rpm", "tpm")
                             if getattr(args, name) is not None}
    if given:
        try:
            made["limits"] = api.call("PUT", "/api/v1/limits",
                                      {"scope": args.kind, "id": made["id"], "limits": given})["limits"]
        except AdminError as e:
            raise AdminError(f"{args.kind} {made['path']} is made, without limits: {e}") from None
    if args.json:
        emit_json(made)
        return 0
    limits = _limits_text(made.get("limits") or {})
    print(f"{args.kind} {made['path']} is made ({made['id']})" + (f", with {limits}" if limits else ""))
    return 0


def limits_text(limits: dict[str, Any] | None) -> str:
    return _limits_text(limits or {}) or "-"
