"""People: the org/team/project tree with its limits, the people and their roles, and the API keys.

The same admin API calls as `llmgw ctl tree`, `llmgw people` and `llmgw
keys list`; a person or a place added here is added by the same routes as
`llmgw people add` and `llmgw ctl tree add`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import urwid

from llmgw.account.limits import describe
from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient, AdminError

KINDS = ("org", "team", "project")


def limits_text(limits: dict[str, Any] | None) -> str:
    return "; ".join(describe(limits)) or "no limits of its own"


@dataclass
class Directory:
    tree: list[dict[str, Any]]
    people: list[dict[str, Any]]
    keys: list[dict[str, Any]]


class People:
    title = "People"
    command = "llmgw ctl tree; llmgw people list|add; llmgw keys list"
    keys = "p add a person  n add an org, team or project  l limits"

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def load(self) -> Directory:
        return Directory(self.client.tree(), self.client.people(), self.client.call("GET", "/api/v1/keys"))

    def show(self, d: Directory) -> urwid.Widget:
        return text_list(people_rows(d))

    def keypress(self, app: App, key: str) -> bool:
        if key == "p":
            app.form("Add a person (a password is made and shown once)",
                     [("email", "e-mail", ""), ("name", "name", ""), ("role", "role", "member"),
                      ("place", "member of (a path)", "")],
                     self._add_person, then=lambda made: self._made(app, made))
        elif key == "n":
            app.form("Add to the tree", [("kind", "org, team or project", "team"),
                                         ("path", "path (Acme/web/app)", "")],
                     self._add_place, then=lambda made: self._placed(app, made))
        elif key == "l":
            app.form("Limits of a place or a key (blank: unchanged; none: no limit of its own)",
                     [("place", "place (Acme/web) or key id", ""), ("rpm", "requests a minute", ""),
                      ("tpm", "tokens a minute", ""), ("budget", "budget (25.00)", ""),
                      ("period", "budget's period (day, month)", "")],
                     self._limits, then=lambda answer: self._limited(app, answer))
        else:
            return False
        return True

    def _limits(self, v: dict[str, str]) -> dict[str, Any]:
        """PUT /api/v1/limits for the place named by its path (or a key by its id), as `llmgw keys limits` does."""
        place = v.get("place", "").strip().strip("/")
        if not place:
            raise AdminError("say whose limits: a place's path, like Acme/web, or a key's id, like key_0123abcd")
        if place.startswith("key_"):
            scope, ident = "key", place
        else:
            scope, ident = find_place(self.client.tree(), place)
        given: dict[str, Any] = {}
        for name in ("rpm", "tpm"):
            text = v.get(name, "")
            if text:
                if text.lower() == "none":
                    given[name] = None
                elif text.isdigit():
                    given[name] = int(text)
                else:
                    raise AdminError(f"{name} takes a whole number or none, not {text!r}")
        if v.get("budget"):
            given["budget"] = None if v["budget"].lower() == "none" else v["budget"]
        if v.get("period"):
            given["period"] = v["period"]
        if not given:
            raise AdminError("nothing to change: give requests or tokens a minute, or a budget")
        answer = self.client.call("PUT", "/api/v1/limits", {"scope": scope, "id": ident, "limits": given})
        return {**answer, "place": place}

    def _limited(self, app: App, answer: dict[str, Any]) -> None:
        app.say(f"{answer['place']}: {limits_text(answer.get('limits'))}")
        app.refresh()

    def _add_person(self, v: dict[str, str]) -> dict[str, Any]:
        if not v.get("email"):
            raise AdminError("a person needs an e-mail address, like ada@example.com")
        return self.client.person_add(v["email"], v.get("name") or v["email"].split("@")[0],
                                      role=v.get("role") or "member",
                                      member_of=[v["place"]] if v.get("place") else None)

    def _add_place(self, v: dict[str, str]) -> dict[str, Any]:
        kind = v.get("kind", "").strip().lower()
        if kind not in KINDS:
            raise AdminError(f"the kind is org, team or project, not {kind!r}")
        made = self.client.tree_add(kind, v.get("path", ""))
        return {**made, "kind": kind}

    def _placed(self, app: App, made: dict[str, Any]) -> None:
        app.say(f"{made['kind']} {made['path']} is made ({made['id']})")
        app.refresh()

    def _made(self, app: App, person: dict[str, Any]) -> None:
        rows: list[Any] = [f"{person['email']} ({person['name']}) is added as {person['role']}."]
        if person.get("password"):
            rows += ["", ["password, shown once: ", ("note", person["password"])],
                     "They sign in on the portal with it and are asked to choose their own."]
        app.say(f"{person['email']} is added as {person['role']}")
        app.message("A person added", rows)
        app.refresh()


def find_place(tree: list[dict[str, Any]], path: str) -> tuple[str, str]:
    """(org|team|project, its id) for a path of the tree; a refusal naming the orgs when there is none."""
    for org in tree:
        if org["name"] == path:
            return "org", org["id"]
        for team in org.get("teams") or []:
            if team["path"] == path:
                return "team", team["id"]
            for project in team.get("projects") or []:
                if project["path"] == path:
                    return "project", project["id"]
    known = ", ".join(org["name"] for org in tree) or "none yet"
    raise AdminError(f"there is no {path} in the tree (its orgs: {known}); give a path like Acme/web/app")


def people_rows(d: Directory) -> list[Any]:
    rows: list[Any] = [("title", "The tree (limits: each level narrows the one above)")]
    if not d.tree:
        rows.append(("dim", "  empty: n adds an org"))
    for org in d.tree:
        rows.append(f"  {org['name']:<40} {limits_text(org.get('limits'))}")
        for team in org.get("teams") or []:
            rows.append(f"    {team['path']:<38} {limits_text(team.get('limits'))}")
            for project in team.get("projects") or []:
                rows.append(f"      {project['path']:<36} {limits_text(project.get('limits'))}")
    rows += ["", ("title", f"People ({len(d.people)})")]
    for p in d.people:
        state = p["state"]
        places = ", ".join(p.get("member_of") or []) or "-"
        rows.append(["  ", ("good" if state == "active" else "bad", f"{state:<10}"),
                     f" {p['email']:<32} {p['name']:<22} {p['role']:<9} {places}"])
    rows += ["", ("title", f"API keys ({len(d.keys)})")]
    if not d.keys:
        rows.append(("dim", "  none yet: llmgw keys create NAME --project PATH, or a person's own on /profile/keys"))
    for k in d.keys:
        rows.append(["  ", ("good" if k["state"] == "active" else "dim", f"{k['state']:<10}"),
                     f" {k['id']:<22} {k['name']:<20} {k['prefix']}…  {k['project']}"])
    return rows
