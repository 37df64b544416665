"""Reports of usage for people to read: days by model, key, project or person,
spend against budgets, and exports of the raw rows.

Days are UTC days (floor(at / 86400)), read from the store's day sums
(usage_daily), so a month's report costs the same however many requests it
holds. Exports read the raw rows a page at a time. The admin API, the CLI
(through the admin API) and the portal all call these, so a report is the
same wherever it is read.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Protocol

import orjson

from llmgw.accounting.budgets import period_start
from llmgw.errors import N_
from llmgw.store import KeysStore, Usage, UsageDay, UsageStore

DAY = 86400
# Rows per store read in an export: large enough that the round trips do
# not dominate, small enough that a page is a few hundred KB in memory.
EXPORT_PAGE = 1000
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
COLUMNS = ("id", "at", "time", "key_id", "project_id", "model", "endpoint", "status", "prompt_tokens",
           "cached_tokens", "completion_tokens", "cost_micros", "ttft_ms", "duration_ms", "cache", "detail",
           "answer_id")
BY = ("model", "key", "project", "person")


@dataclass(frozen=True)
class Series:
    """Days in a span and each group's sums on every one of them.

    `days` lists every UTC day of the span, oldest first, including days
    with nothing. Each group (a model's name, or a key's, project's or
    person's id; "" for requests without one) has one UsageDay a day,
    aligned with `days`, most costly group first. `totals` sums the whole
    span: its day is the first, its group None and its model "".
    """

    days: list[int]
    groups: dict[str, list[UsageDay]]
    totals: UsageDay


def _empty(day: int, group: str | None = None, model: str = "") -> UsageDay:
    return UsageDay(day, group, model, 0, 0, 0, 0, 0, 0)


def _added(a: UsageDay, b: UsageDay) -> UsageDay:
    """a's day, group and model with b's sums added."""
    return replace(a, requests=a.requests + b.requests, errors=a.errors + b.errors,
                   prompt_tokens=a.prompt_tokens + b.prompt_tokens, cached_tokens=a.cached_tokens + b.cached_tokens,
                   completion_tokens=a.completion_tokens + b.completion_tokens,
                   cost_micros=a.cost_micros + b.cost_micros)


def day_span(since: float, until: float) -> tuple[int, int]:
    """The UTC days touching [since, until): the first, and the one after the last."""
    return int(since // DAY), max(int(since // DAY), math.ceil(until / DAY))


# What a view of one measure says in place of its chart when it has nothing to draw. The portal's
# usage pages and `llmgw ctl usage` (through the admin API) say the same sentence for the same sums.
NOTHING_USED = N_("Nothing was used in this span.")
ALL_FAILED = N_("Every request in this span failed, so none of them counted tokens or cost.")
NONE_OF = {
    "cost_micros": N_("No spend in this span: the models used cost nothing."),
    "prompt_tokens": N_("No prompt tokens were counted in this span's requests."),
    "cached_tokens": N_("No cached tokens were counted in this span's requests."),
    "completion_tokens": N_("No completion tokens were counted in this span's requests."),
    "errors": N_("No request in this span failed."),
}


def nothing_shown(*, requests: int, errors: int, value: int, metric: str) -> str | None:
    """Why a view of `metric` over a span has nothing to draw, as a sentence; None when it has something.

    `value` is the span's sum of `metric`. A view of spend over a model with
    no price drew nothing and said "Nothing was used" above a table of 15
    requests (issue 25): with requests in the span, the sentence says which
    measure is empty and why, so the reader knows the requests are counted.
    """
    if not requests:
        return NOTHING_USED
    if value:
        return None
    if errors == requests and metric != "errors":
        return ALL_FAILED
    return NONE_OF.get(metric)


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _exported(row: Usage) -> dict[str, object]:
    # The export's fields are those it had before usage knew its person;
    # adding one is a change for every script that reads the files.
    values = asdict(row)
    del values["person_id"]
    del values["batch_id"]  # a batch line's row says its batch in detail.batch
    return values


def csv_line(row: Usage) -> str:
    buffer = io.StringIO()
    values = _exported(row)
    values["time"] = _iso(row.at)
    values["detail"] = orjson.dumps(row.detail or {}).decode()
    csv.writer(buffer, lineterminator="\n").writerow(["" if values[c] is None else values[c] for c in COLUMNS])
    return buffer.getvalue()


def jsonl_line(row: Usage) -> bytes:
    return orjson.dumps(_exported(row)) + b"\n"


class _Store(KeysStore, UsageStore, Protocol):
    """What UsageReports reads: usage and its day sums, and the tree's projects they are summed over."""


class UsageReports:
    def __init__(self, store: _Store):
        self.store = store

    async def by_day(self, *, since: float, until: float, person_id: str | None = None,
                     project_ids: Sequence[str] | None = None, key_id: str | None = None,
                     by: str = "model") -> Series:
        """Every UTC day touching [since, until), each group's sums a day.

        `by` is model, key, project or person; the filters narrow to one
        person, some projects or one key. Whole days are counted: a span
        starting at noon counts that day from midnight, as the pages say.
        """
        if by not in BY:
            raise ValueError(f'usage is reported by {", ".join(BY)}, not "{by}"')
        first, after = day_span(since, until)
        rows = await self.store.usage_by_day(first, after, person_id=person_id, project_ids=project_ids,
                                             key_id=key_id, by=by)
        days = list(range(first, after))
        # The store gives one row a day and group (a group's models already
        # summed), so a row is the Series' UsageDay as it is: a cluster's
        # month by project is 3,000 rows, and making each again, or adding
        # it up field by field, was most of /admin/usage's time
        # (benchmarks/bench_portal.py). A second row for a cell is added in.
        cells: dict[str, dict[int, UsageDay]] = {}
        for row in rows:
            name = row.model if by == "model" else row.group or ""
            group, model = (None, name) if by == "model" else (name or None, "")
            if row.group != group or row.model != model:
                row = replace(row, group=group, model=model)
            on_day = cells.get(name)
            if on_day is None:
                on_day = cells[name] = {}
            held = on_day.get(row.day)
            on_day[row.day] = row if held is None else _added(held, row)
        totals = [sum(r.requests for r in rows), sum(r.errors for r in rows), sum(r.prompt_tokens for r in rows),
                  sum(r.cached_tokens for r in rows), sum(r.completion_tokens for r in rows),
                  sum(r.cost_micros for r in rows)]
        groups = {}
        for name, on_day in cells.items():
            group, model = (None, name) if by == "model" else (name or None, "")
            if len(on_day) == len(days):
                groups[name] = [on_day[d] for d in days]
            else:
                groups[name] = [on_day.get(d) or _empty(d, group, model) for d in days]
        ordered = dict(sorted(groups.items(), key=lambda g: (-sum(d.cost_micros for d in g[1]),
                                                              -sum(d.requests for d in g[1]), g[0])))
        totals_day = UsageDay(first, None, "", *totals)
        return Series(days, ordered, totals_day)

    async def key_spend(self, key_ids: Sequence[str], now: float) -> dict[str, dict[str, int]]:
        """Each key's spend in the UTC day and the UTC month holding `now`, in micro-units."""
        day = await self.store.spend_by_keys(key_ids, int(period_start("day", now) // DAY))
        month = await self.store.spend_by_keys(key_ids, int(period_start("month", now) // DAY))
        return {k: {"day": day.get(k, 0), "month": month.get(k, 0)} for k in key_ids}

    async def scope_spend(self, scope: str, scope_id: str, period: str, now: float) -> int:
        """A key's, project's, team's or org's spend in the period ("day" or
        "month", UTC) holding `now`, in micro-units. A team's and an org's are
        their projects' as they are placed now, as budgets count them."""
        since = int(period_start(period, now) // DAY)
        if scope == "key":
            return (await self.store.spend_by_keys([scope_id], since))[scope_id]
        if scope == "project":
            projects = [scope_id]
        elif scope == "team":
            projects = [p.id for p in await self.store.list_projects(scope_id)]
        elif scope == "org":
            projects = [p.id for t in await self.store.list_teams(scope_id)
                        for p in await self.store.list_projects(t.id)]
        else:
            raise ValueError(f'"{scope}" is not a level of spend; use key, project, team or org')
        return await self.store.spend_by_projects(projects, since)

    async def export(self, *, since: float, until: float, fmt: str, person_id: str | None = None,
                     project_ids: Sequence[str] | None = None) -> AsyncIterator[bytes]:
        """The raw rows of [since, until), oldest first, as CSV with a header or JSON lines.

        The first chunk holds the first page and comes after it is read, so
        a caller that awaits it before answering can still refuse when the
        store is away. A StoreError from a later page is the caller's to
        turn into a cut-off transfer, never a short file that looks whole.
        """
        if fmt not in FORMATS:
            raise ValueError(f'exports are {" or ".join(FORMATS)}, not "{fmt}"')
        if project_ids is not None and not project_ids:
            yield ",".join(COLUMNS).encode() + b"\n" if fmt == "csv" else b""
            return
        page = await self.store.usage_page(since, until, limit=EXPORT_PAGE, person_id=person_id,
                                           project_ids=project_ids)
        head = ",".join(COLUMNS).encode() + b"\n" if fmt == "csv" else b""
        while True:
            chunk = "".join(csv_line(r) for r in page).encode() if fmt == "csv" else b"".join(
                jsonl_line(r) for r in page)
            yield head + chunk
            head = b""
            if len(page) < EXPORT_PAGE:
                return
            last = page[-1]
            page = await self.store.usage_page(since, until, after_at=last.at, after_id=last.id,
                                               limit=EXPORT_PAGE, person_id=person_id, project_ids=project_ids)
