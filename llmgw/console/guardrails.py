"""Guardrails: the policies in the cluster's settings, what each checks, and where each applies.

Read from the settings (GET /api/v1/config, path guard), as `llmgw ctl
config get guard` prints them; changed on the Settings screen or with
`llmgw ctl config set guard.…`, where the same validation refuses a bad one.
"""

from __future__ import annotations

from typing import Any

import urwid

from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient


def _rules(rules: dict[str, Any] | None) -> str:
    rules = rules or {}
    parts = [f"{name} {rules[name]}" for name in ("secrets", "cards", "injection") if rules.get(name)]
    if rules.get("pii"):
        parts.append("PII " + ", ".join(f"{k} {v}" for k, v in sorted(rules["pii"].items())))
    if rules.get("deny"):
        parts.append(f"{len(rules['deny'])} patterns")
    if rules.get("detectors"):
        parts.append("detectors " + ", ".join(f"{k} {v}" for k, v in sorted(rules["detectors"].items())))
    if rules.get("max_chars"):
        parts.append(f"at most {rules['max_chars']} characters")
    return ", ".join(parts) or "nothing"


class Guardrails:
    title = "Guardrails"
    command = "llmgw ctl config get guard; llmgw ctl config set guard.… ; llmgw ctl guard judge check"
    keys = ""

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def load(self) -> dict[str, Any]:
        return self.client.call("GET", "/api/v1/config", query={"path": "guard"})["value"] or {}

    def show(self, guard: dict[str, Any]) -> urwid.Widget:
        return text_list(guard_rows(guard))

    def keypress(self, app: App, key: str) -> bool:
        return False


def guard_rows(guard: dict[str, Any]) -> list[Any]:
    policies = guard.get("policies") or {}
    rows: list[Any] = [["Guardrails ", ("good", "on") if guard.get("enabled", True) else ("bad", "OFF"),
                        f"; on every request: {', '.join(guard.get('default') or []) or 'no policy'}"], ""]
    if not policies:
        rows.append(("dim", "No policies. The Settings screen (or llmgw ctl config set) adds them under "
                            "guard.policies; docs/guardrails.md has the keys."))
    for name, p in sorted(policies.items()):
        p = p or {}
        rows += [[("title", name), f"  {p.get('mode', 'enforce')}, fails {p.get('fail', 'open')}"
                  + (", nothing stored" if p.get("no_store") else "")],
                 f"  prompts: {_rules(p.get('input'))}",
                 f"  answers: {_rules(p.get('output'))}"]
        judge = p.get("judge")
        if judge:
            rows.append(f"  judge: {judge.get('model')} on {judge.get('on', 'input')}, "
                        f"{judge.get('action', 'block')} within {judge.get('latency_budget', '5s')}")
        for service in p.get("services") or []:
            rows.append(f"  outside service: {service.get('name')} at {service.get('url')}")
        rows.append("")
    attach = guard.get("attach") or []
    if attach:
        rows.append(("title", "Where policies apply besides every request"))
        for a in attach:
            rows.append(f"  {a.get('scope')} {a.get('id')}: {', '.join(a.get('policies') or [])}")
    return rows
