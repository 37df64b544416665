"""A person's own usage: by UTC day and model over 7, 30 or 90 days, as a chart and tables, and as CSV.

Everything here is the person's: their keys' requests and their chat's,
read from the store's day sums by person (one query for the page); the CSV
is the raw rows, read a page at a time, so a long span never sits in memory.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from llmgw.accounting import NOTHING_USED
from llmgw.control import send_export
from llmgw.errors import N_
from llmgw.portal import i18n, security
from llmgw.portal.charts import bars
from llmgw.portal.member import now
from llmgw.portal.web import LANG, NONCE, PORTAL, Viewer, add_nav, page, render, render_error
from llmgw.store import StoreError, UsageDay

add_nav("main", "/usage", N_("Usage"), "member")

DAY = 86400
SPANS = (7, 30, 90)
METRICS = {"cost_micros": N_("Spend"), "requests": N_("Requests"), "prompt_tokens": N_("Prompt tokens"),
           "completion_tokens": N_("Completion tokens")}


def span(request: web.Request) -> int:
    """The days asked for; anything but 7, 30 or 90 is the default 30, since a link is all that sets it."""
    try:
        days = int(request.query.get("days", "30"))
    except ValueError:
        return 30
    return days if days in SPANS else 30


def window(at: float, days: int) -> tuple[float, float]:
    """[since, until): the last `days` UTC days, today's included."""
    today = int(at // DAY)
    return (today - days + 1) * DAY, at


@page("/usage")
async def usage(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    days = span(request)
    metric = request.query.get("metric", "cost_micros")
    metric = metric if metric in METRICS else "cost_micros"
    since, until = window(now(request), days)
    series = await portal.reports.by_day(since=since, until=until, person_id=viewer.person.id, by="model")
    lang = request[LANG]
    title = _title(lang, metric, days)
    chart = bars(series, lang=lang, metric=metric, title=title, requests_view=f"/usage?days={days}&metric=requests")
    by_model = [(model, _sum(rows)) for model, rows in series.groups.items()]
    by_day = [(day * DAY, _sum([rows[i] for rows in series.groups.values()], day))
              for i, day in enumerate(series.days)]
    return render(request, "usage.html", title=N_("Usage"), days=days, spans=SPANS, metric=metric,
                  metrics=METRICS, chart=chart, by_model=by_model, by_day=list(reversed(by_day)),
                  totals=series.totals, nothing=NOTHING_USED, first=series.days[0] * DAY, last=series.days[-1] * DAY)


@page("/usage.csv")
async def usage_csv(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    assert viewer is not None
    portal = request.app[PORTAL]
    days = span(request)
    at = now(request)
    since, until = window(at, days)
    chunks = portal.reports.export(since=since, until=until, fmt="csv", person_id=viewer.person.id)
    try:
        first = await anext(chunks)  # read before the status line, so a store that is away gets a page saying so
    except StoreError:
        return render_error(request, 503, N_("The gateway's store does not answer; try again in a minute."))
    name = f"llmgw-usage-{dt.datetime.fromtimestamp(at, dt.UTC):%Y-%m-%d}-{days}d.csv"
    response = web.StreamResponse(headers={
        "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{name}"',
    })
    security.protect(response, request[NONCE], private=True)
    return await send_export(request, response, first, chunks, what="a person's usage export")


def _title(lang: str, metric: str, days: int) -> str:
    return i18n.gettext(lang, N_("{what} by day and model, last {days} days (UTC)")).format(
        what=i18n.gettext(lang, METRICS[metric]), days=days)


def _sum(rows: list[UsageDay], day: int = 0) -> UsageDay:
    total = UsageDay(day, None, "", 0, 0, 0, 0, 0, 0)
    for r in rows:
        total = UsageDay(day, None, "", total.requests + r.requests, total.errors + r.errors,
                         total.prompt_tokens + r.prompt_tokens, total.cached_tokens + r.cached_tokens,
                         total.completion_tokens + r.completion_tokens, total.cost_micros + r.cost_micros)
    return total

