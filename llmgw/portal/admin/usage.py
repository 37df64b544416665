"""/admin/usage: the cluster's usage by project, person or model over 7, 30 or 90 UTC days, and its CSV.

The numbers are UsageReports.by_day's, read from the store's day sums: by
project or person from the day totals (0010), by model from the per-project
rollup (0009), so a month of a busy cluster is a few thousand rows, not its
millions of requests. The
chart is charts.bars over the same Series the table shows. The CSV is
UsageReports.export, the rows `llmgw usage export` writes. Admins only:
usage is money, which an operator does not see; an org's or a team's
administrator sees their projects' alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiohttp import web

from llmgw.account import Walls
from llmgw.accounting import NOTHING_USED, Series
from llmgw.control import send_export
from llmgw.errors import N_
from llmgw.portal import charts, i18n, security
from llmgw.portal.web import LANG, NONCE, PORTAL, Viewer, add_nav, page, render, render_error
from llmgw.store import KeysStore, PeopleStore, StoreError

log = logging.getLogger("llmgw.portal")

add_nav("admin", "/admin/usage", N_("Usage"), "admin", tenants=True)

DAY = 86400
SPANS = (7, 30, 90)
BY = {"project": N_("Project"), "person": N_("Person"), "model": N_("Model")}
METRICS = {"cost_micros": N_("Cost"), "requests": N_("Requests"), "completion_tokens": N_("Tokens out")}


T = TypeVar("T")


@dataclass(frozen=True)
class UsageRow:
    """One group's line in the table, summed over the span."""

    name: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    cost_micros: int


def choice(request: web.Request, name: str, allowed: Iterable[T], default: T) -> T:
    """A query parameter, when it is one of `allowed`; the default otherwise (a link typed by hand)."""
    value = request.query.get(name, "")
    for option in allowed:
        if str(option) == value:
            return option
    return default


class _Store(KeysStore, PeopleStore, Protocol):
    """What names reads: the tree's names and people's e-mails."""


async def names(store: _Store, by: str, series: Series, nobody: str) -> dict[str, str]:
    """Each group's id -> what a person reads, for the table and the chart's legend alike.

    A project is its ORG/TEAM/PROJECT, a person their e-mail, a model its
    name; requests without a project or person are `nobody`. A group whose
    project or person is gone keeps its id, the one thing left to name it.
    """
    known: dict[str, str] = {}
    if by == "project":
        orgs = {o.id: o.name for o in await store.list_orgs()}
        teams = {t.id: f"{orgs.get(t.org_id, t.org_id)}/{t.name}" for t in await store.list_teams()}
        known = {p.id: f"{teams.get(p.team_id, p.team_id)}/{p.name}" for p in await store.list_projects()
                 if p.id in series.groups}
    elif by == "person":
        known = {p.id: p.email for p in await store.list_people() if p.id in series.groups}
    return {group: known.get(group, group) if group else nobody for group in series.groups}


def rows(series: Series, labels: dict[str, str]) -> list[UsageRow]:
    """One row a group, summed over the span, costliest first (as Series orders them)."""
    return [UsageRow(name=labels[group], requests=sum(d.requests for d in days), errors=sum(d.errors for d in days),
                     prompt_tokens=sum(d.prompt_tokens for d in days),
                     completion_tokens=sum(d.completion_tokens for d in days),
                     cost_micros=sum(d.cost_micros for d in days))
            for group, days in series.groups.items()]


@page("/admin/usage", role="admin", tenants=True)
async def usage(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    lang = request[LANG]
    days = choice(request, "days", SPANS, 30)
    by = choice(request, "by", BY, "project")
    metric = choice(request, "metric", METRICS, "cost_micros")
    until = time.time()
    series = await portal.reports.by_day(since=until - (days - 1) * DAY, until=until, by=by,
                                         project_ids=await Walls(portal.store, viewer.within).project_ids())
    title = i18n.gettext(lang, N_("{metric} a day, by {by}, over the last {days} UTC days")).format(
        metric=i18n.gettext(lang, METRICS[metric]), by=i18n.gettext(lang, BY[by]).lower(), days=days)
    # One set of names for the legend and the rows, so a colour is read against the table it sums.
    labels = await names(portal.store, by, series, i18n.gettext(lang, N_("none")))
    chart = charts.bars(series, lang=lang, metric=metric, title=title, labels=labels,
                        requests_view=f"/admin/usage?days={days}&by={by}&metric=requests")
    return render(request, "admin/usage.html", title=N_("Usage"), days=days, by=by, metric=metric, spans=SPANS,
                  by_options=BY, metrics=METRICS, chart=chart, chart_title=title, totals=series.totals,
                  nothing=NOTHING_USED,
                  rows=rows(series, labels),
                  first_day=series.days[0] * DAY if series.days else until)


@page("/admin/usage.csv", role="admin", tenants=True)
async def usage_csv(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    days = choice(request, "days", SPANS, 30)
    until = time.time()
    since = (int(until // DAY) - (days - 1)) * DAY  # whole UTC days, as the page counts them
    chunks = portal.reports.export(since=since, until=until, fmt="csv",
                                   project_ids=await Walls(portal.store, viewer.within).project_ids())
    try:
        # The first page before the answer starts: a store that is away is
        # the error page, not an empty file.
        first = await anext(chunks)
    except StoreError as e:
        log.warning("the admin usage export could not start: %s", e)
        return render_error(request, 503, N_("The gateway's store does not answer; try again in a minute."))
    response = web.StreamResponse(headers={
        "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": f'attachment; filename="llmgw-usage-{days}d.csv"',
    })
    security.protect(response, request[NONCE], private=True)  # the frame cannot, once the answer has started
    return await send_export(request, response, first, chunks, what="the admin usage export")
