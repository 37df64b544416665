"""/admin/guardrails: the guardrail policies in force, and the latest decisions, never their text.

The policies are the cluster's settings under `guard` (what
`llmgw ctl config get guard` shows), read live; changing them is the
settings page's. The decisions are the latest usage rows whose detail
records a guardrail decision (Store.recent_decisions): a rule, an action
and a direction, with the request's model and project. The text that set
a rule off was never stored, so it cannot be shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from llmgw.config import GuardSettings, Policy, Rules
from llmgw.errors import N_
from llmgw.portal.web import PORTAL, Viewer, add_nav, page, render
from llmgw.store import KeysStore, UsageStore

add_nav("admin", "/admin/guardrails", N_("Guardrails"), "operator")

DECISIONS = 50


def rules(direction: str, r: Rules) -> list[tuple[str, str, str]]:
    """(direction, rule, action) for every rule a policy's direction checks, named as decisions name them."""
    out: list[tuple[str, str, str]] = []
    for name, action in (("secrets", r.secrets), ("cards", r.cards), ("injection", r.injection)):
        if action:
            out.append((direction, name, action))
    out += [(direction, f"pii:{kind}", action) for kind, action in sorted(r.pii.items())]
    out += [(direction, f"deny:{p.name}", p.action) for p in r.deny]
    out += [(direction, kind, action) for kind, action in sorted(r.detectors.items())]
    if r.max_chars:
        out.append((direction, "max_chars", f"block > {r.max_chars}"))
    return out


def policy_rows(policy: Policy) -> list[tuple[str, str, str]]:
    out = rules("input", policy.input) + rules("output", policy.output)
    if policy.judge is not None:
        on = ("input", "output") if policy.judge.on == "both" else (policy.judge.on,)
        out += [(d, f"judge:{policy.judge.model}", policy.judge.action) for d in on]
    for service in policy.services:
        on = ("input", "output") if service.on == "both" else (service.on,)
        out += [(d, f"service:{service.name}", service.action) for d in on]
    return out


def where(guard: GuardSettings) -> dict[str, list[str]]:
    """Each policy's name -> where it applies: everywhere, or the places it is attached to."""
    places: dict[str, list[str]] = {name: [] for name in guard.policies}
    for name in guard.default:
        places.setdefault(name, []).append("*")
    for attachment in guard.attach:
        for name in attachment.policies:
            places.setdefault(name, []).append(f"{attachment.scope}:{attachment.id}")
    return places


async def project_names(store: KeysStore) -> dict[str, str]:
    """Every project's id -> ORG/TEAM/PROJECT, in three reads whatever the number of rows shown."""
    orgs = {o.id: o.name for o in await store.list_orgs()}
    teams = {t.id: f"{orgs.get(t.org_id, t.org_id)}/{t.name}" for t in await store.list_teams()}
    return {p.id: f"{teams.get(p.team_id, p.team_id)}/{p.name}" for p in await store.list_projects()}


@dataclass(frozen=True)
class Decision:
    """One guardrail decision as the page lists it."""

    at: float
    rule: str
    action: str
    direction: str  # "input" (the prompt) or "output" (the answer)
    model: str
    project: str  # ORG/TEAM/PROJECT, or the project's id when it is gone
    request: str  # the usage row's id


class _Store(KeysStore, UsageStore, Protocol):
    """What decisions reads: the usage rows with decisions, and the projects' names."""


async def decisions(store: _Store, limit: int = DECISIONS) -> list[Decision]:
    """The latest decisions, newest first: a row a decision, with only what the usage row says of it."""
    rows = await store.recent_decisions(limit)
    names = await project_names(store) if rows else {}
    out = []
    for u in rows:
        for d in (u.detail or {}).get("guard") or []:
            if not isinstance(d, dict):
                continue
            out.append(Decision(at=u.at, rule=str(d.get("rule", "")), action=str(d.get("action", "")),
                                direction=str(d.get("direction", "")), model=u.model,
                                project=names.get(u.project_id or "", u.project_id or ""), request=u.id))
    return out


@page("/admin/guardrails", role="operator")
async def guardrails(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    portal = request.app[PORTAL]
    guard = portal.plane.settings.current.guard
    places = where(guard)
    policies = [{"name": name, "policy": policy, "rules": policy_rows(policy), "where": places.get(name, [])}
                for name, policy in sorted(guard.policies.items())]
    return render(request, "admin/guardrails.html", title=N_("Guardrails"), enabled=guard.enabled,
                  policies=policies, decisions=await decisions(portal.store))
