"""Bar charts of usage, drawn on the server as inline SVG.

The portal's CSP allows no inline style and no script, so a chart is plain
SVG whose look comes from classes (portal.css: `.chart`, `.bar-0` … `.bar-5`,
`.bar-other`): it needs no JavaScript, prints, and reads the same in every
browser. A screen reader gets the chart's <title> and a <desc> with the span's
total; every bar carries a <title> with its day, group and value, which is
also what a pointer shows on hover. The page puts the same numbers in a table
beside it, so the chart is never the only way to read them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from markupsafe import Markup, escape

from llmgw.accounting import NOTHING_USED, Series, nothing_shown
from llmgw.errors import N_
from llmgw.portal import i18n
from llmgw.store import UsageDay

METRICS = ("requests", "errors", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_micros")
# Six colours are as many as a legend can tell apart at a glance; the rest
# of the groups (the cheapest, since Series lists the costliest first) are
# drawn as one "other" stack so the day's bar still shows its whole total.
COLOURS = 6
WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 12, 28
LEGEND_ROW = 18
# A legend column is a third of the plot, about 30 characters at the chart's 11px: a longer name
# (an ORG/TEAM/PROJECT) is cut there with an ellipsis and read whole in its <title> and the bars' titles.
LEGEND_CHARS = 30
OTHER = N_("other")
SHOW_REQUESTS = N_("Show the requests instead")


def bars(series: Series, *, lang: str, metric: str = "cost_micros", title: str,
         requests_view: str | None = None, labels: Mapping[str, str] | None = None) -> Markup:
    """One bar a UTC day, stacked by group, as an accessible <svg>; a sentence when there is nothing to draw.

    `metric` is one of UsageDay's sums; `title` is already in the reader's
    language. Every bar's height is its value over the tallest day's total,
    so bars compare across days and across groups. The sentence is
    reports.nothing_shown's: a span with requests but none of `metric` says
    so, and links to `requests_view` (the page's URL counting requests) when given.
    `labels` names a group as the page's table does (a project's id ->
    ORG/TEAM/PROJECT): the legend and the bars' titles read the same names
    as the rows under the chart; a group without one is shown as it is.
    """
    if metric not in METRICS:
        raise ValueError(f"a chart shows one of {', '.join(METRICS)}, not {metric!r}")
    stacks = _stacks(series, metric)
    totals = [sum(value for _, value in day) for day in stacks]
    if not series.days or not any(totals):
        said = nothing_shown(requests=series.totals.requests, errors=series.totals.errors, value=0,
                             metric=metric) or NOTHING_USED
        empty = Markup('<p class="chart-empty">{}').format(_say(lang, said))
        if requests_view and series.totals.requests:
            empty += Markup(' <a href="{}">{}</a>').format(requests_view, _say(lang, SHOW_REQUESTS))
        return empty + Markup("</p>")
    names = _names(series, lang, labels or {})
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    legend_rows = (len(names) + 2) // 3
    height = HEIGHT + legend_rows * LEGEND_ROW
    top = max(totals)
    step = plot_w / len(series.days)
    gap = min(2.0, step / 5)
    grand = sum(totals)
    parts = [
        Markup('<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
               'viewBox="0 0 {} {}" width="{}" height="{}">').format(WIDTH, height, WIDTH, height),
        Markup("<title>{}</title>").format(title),
        Markup("<desc>{}</desc>").format(_describe(series.days, grand, metric, lang)),
        Markup('<line class="axis" x1="{x}" y1="{y}" x2="{x2}" y2="{y}"/>').format(
            x=LEFT, x2=WIDTH - RIGHT, y=TOP + plot_h),
        Markup('<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>').format(
            LEFT - 4, TOP + 10, _value(_rounded(top, metric), metric, lang)),
        Markup('<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>').format(
            LEFT - 4, TOP + plot_h, _value(0, metric, lang)),
    ]
    # The bars are most of the chart (a month of seven colours is ~200): written with f-strings and
    # escape() on the one field that is not ours or a number, since Markup.format's escaping of every
    # field was a third of /admin/usage's time (benchmarks/bench_portal.py).
    shown = {colour: escape(name) for colour, name in names.items()}
    width = f"{step - gap:.2f}"
    for i, (day, stack) in enumerate(zip(series.days, stacks, strict=True)):
        left = f"{LEFT + i * step + gap / 2:.2f}"
        base: float = TOP + plot_h
        when = _day(day)
        for colour, value in stack:
            if not value:
                continue
            h = value / top * plot_h
            base -= h
            parts.append(Markup(  # noqa: S704 - escaped above, for speed: see the comment on `shown`
                f'<rect class="bar {colour}" x="{left}" y="{base:.2f}" width="{width}" height="{h:.2f}" '
                f'data-value="{int(value)}"><title>{when}: {shown[colour]}, '
                f"{escape(_value(value, metric, lang))}</title></rect>"))
    ticks: list[tuple[float, str, int]] = [(LEFT, "start", series.days[0])]
    if len(series.days) > 1:
        ticks.append((WIDTH - RIGHT, "end", series.days[-1]))
    for x, anchor, day in ticks:
        parts.append(Markup('<text class="tick" x="{}" y="{}" text-anchor="{}">{}</text>').format(
            x, TOP + plot_h + 16, anchor, _day(day)))
    for n, (colour, name) in enumerate(names.items()):
        x = LEFT + (n % 3) * (plot_w / 3)
        y = HEIGHT + (n // 3) * LEGEND_ROW
        parts.append(Markup('<rect class="swatch {}" x="{:.2f}" y="{}" width="10" height="10"/>').format(
            colour, x, y - 9))
        parts.append(_legend(x + 14, y, name))
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def _stacks(series: Series, metric: str) -> list[list[tuple[str, int]]]:
    """Each day's (colour class, value) from the bottom up: the costliest groups first, then "other"."""
    groups = list(series.groups.values())
    stacks: list[list[tuple[str, int]]] = []
    for d in range(len(series.days)):
        stack = [(f"bar-{c}", _metric(days[d], metric)) for c, days in enumerate(groups[:COLOURS])]
        rest = sum(_metric(days[d], metric) for days in groups[COLOURS:])
        if len(groups) > COLOURS:
            stack.append(("bar-other", rest))
        stacks.append(stack)
    return stacks


def _names(series: Series, lang: str, labels: Mapping[str, str]) -> dict[str, str]:
    names = {f"bar-{c}": labels.get(group) or group or "—" for c, group in enumerate(list(series.groups)[:COLOURS])}
    if len(series.groups) > COLOURS:
        names["bar-other"] = _say(lang, OTHER)
    return names


def _legend(x: float, y: int, name: str) -> Markup:
    if len(name) <= LEGEND_CHARS:
        return Markup('<text class="legend" x="{:.2f}" y="{}">{}</text>').format(x, y, name)
    return Markup('<text class="legend" x="{:.2f}" y="{}"><title>{}</title>{}…</text>').format(
        x, y, name, name[:LEGEND_CHARS - 1])


def _metric(day: UsageDay, metric: str) -> int:
    value: int = getattr(day, metric)
    return value


def _describe(days: list[int], total: int, metric: str, lang: str) -> str:
    return f"{_day(days[0])} – {_day(days[-1])} (UTC): {_value(total, metric, lang)}"


def _day(day: int) -> str:
    # ISO dates read the same in both languages and sort as they look.
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


def _value(value: int, metric: str, lang: str) -> str:
    # The same figures as the tables beside the chart: money without a sign, since the gateway
    # does not know the site's currency (i18n.money).
    return i18n.money(lang, value) if metric == "cost_micros" else i18n.number(lang, value)


def _rounded(value: int, metric: str) -> int:
    # The axis's top figure is a scale, not a sum to check: cents are enough (the bars' titles are exact).
    return round(value, -4) if metric == "cost_micros" else value


def _say(lang: str, msgid: str) -> str:
    return i18n.gettext(lang, msgid)
