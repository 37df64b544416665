"""What the member pages (keys, usage, connect) share: the clock, one's own keys and projects, the address.

Not a page module (its name does not end in _pages), so `mount` does not
import it for pages; the three page modules do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from llmgw.account import AccountError, Effective, effective
from llmgw.accounting import UsageReports
from llmgw.errors import N_
from llmgw.portal import security
from llmgw.portal.web import PORTAL, Portal, Viewer
from llmgw.store import ApiKey, KeysStore, Limits, ProjectPath

# Tests put a fake clock here, so that "today" and "this month" are fixed
# wherever a test runs; a served portal reads the wall clock.
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("llmgw.portal.clock")
# The levels of the tree as a reader says them, for "60 requests a minute (team)".
LEVELS = {"org": N_("organisation"), "team": N_("team"), "project": N_("project"), "key": N_("key")}
NOT_YOURS = N_("You have no key with that id; the keys page lists yours.")


def now(request: web.Request) -> float:
    return request.app.get(CLOCK, time.time)()


def active(key: ApiKey, at: float) -> bool:
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > at)


async def own_key(portal: Portal, viewer: Viewer, key_id: str) -> ApiKey:
    """The viewer's key with this id; anyone else's, or none, is the same 404, so ids cannot be probed."""
    key = await portal.store.key_by_id(key_id)
    if key is None or key.person_id != viewer.person.id:
        raise AccountError(NOT_YOURS, 404, "not_found")
    return key


async def own_project(portal: Portal, viewer: Viewer, project_id: str) -> ProjectPath:
    """One of the viewer's projects (by id, as the form sends it); any other is refused with a sentence."""
    for path in await portal.people.projects_of(viewer.person.id):
        if path.project.id == project_id:
            return path
    raise AccountError(N_("That project is not one of yours; choose one from the list."), 403, "forbidden")


def max_key_ttl(portal: Portal) -> float:
    return float(portal.plane.settings.current.auth.max_key_ttl)


def address(request: web.Request) -> str:
    """The gateway's address for snippets: portal.address when set, else what this browser used."""
    portal = request.app[PORTAL]
    configured = str(portal.plane.settings.current.portal.address or "").rstrip("/")
    if configured:
        return configured.removesuffix("/v1")
    scheme = "https" if security.over_tls(request, portal.trusted_proxies()) else "http"
    return f"{scheme}://{request.host}"


@dataclass(frozen=True)
class BudgetUse:
    scope: str  # org | team | project | key
    period: str  # day | month
    budget_micros: int
    spent_micros: int

    @property
    def share(self) -> float:
        return self.spent_micros / self.budget_micros if self.budget_micros else 1.0


@dataclass(frozen=True)
class KeyRow:
    key: ApiKey
    path: ProjectPath | None
    limits: Effective
    budgets: list[BudgetUse]
    active: bool


async def key_rows(store: KeysStore, reports: UsageReports, keys: list[ApiKey], at: float) -> list[KeyRow]:
    """Each key with its limit chain folded and its spend against every budget on the chain.

    Keys' own spend is one key_spend call for them all; a project's, team's
    or org's is read once however many of the keys sit under it.
    """
    spend = await reports.key_spend([k.id for k in keys], at)
    paths: dict[str, ProjectPath | None] = {}
    levels: dict[tuple[str, str], Limits | None] = {}
    scope_spend: dict[tuple[str, str, str], int] = {}

    async def level(scope: str, scope_id: str) -> Limits | None:
        if (scope, scope_id) not in levels:
            levels[scope, scope_id] = await store.get_limits(scope, scope_id)
        return levels[scope, scope_id]

    rows = []
    for key in keys:
        if key.project_id not in paths:
            paths[key.project_id] = await store.project_path(key.project_id)
        path = paths[key.project_id]
        chain: list[Limits | None] = []
        if path is not None:
            chain += [await level("org", path.org.id), await level("team", path.team.id),
                      await level("project", path.project.id)]
        chain.append(await store.get_limits("key", key.id))
        folded = effective(chain)
        uses = []
        for budget in folded.budgets:
            if budget.scope == "key":
                spent = spend.get(key.id, {}).get(budget.period, 0)
            else:
                ident = (budget.scope, budget.scope_id, budget.period)
                if ident not in scope_spend:
                    scope_spend[ident] = await reports.scope_spend(*ident, at)
                spent = scope_spend[ident]
            uses.append(BudgetUse(budget.scope, budget.period, budget.micros, spent))
        rows.append(KeyRow(key, path, folded, uses, active(key, at)))
    return rows


def places_of(path: ProjectPath) -> list[tuple[str, str]]:
    """A project's places as knowledge bases are owned and given: its org, its team, itself."""
    return [("org", path.org.id), ("team", path.team.id), ("project", path.project.id)]


async def readable_bases(portal: Portal, path: ProjectPath) -> list[dict[str, object]]:
    """The knowledge bases every key of this project may search: its own, its team's and org's, and given to any."""
    return await portal.knowledge.readable(places_of(path))
