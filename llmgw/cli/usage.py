"""`llmgw ctl usage`, `llmgw ctl usage export` and `llmgw ctl request`: what was used, and by whom."""

from __future__ import annotations

import datetime as dt
import os
import sys
import time

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, fields, table, when
from llmgw.control import AdminError

# Progress on stderr at most this often: a line per row would cost more than the export.
PROGRESS_EVERY = 0.5
BLOCK = 64 * 1024


def register(commands, common) -> None:
    usage = commands.add_parser(
        "usage", parents=[common], help="requests, tokens and money by key, project or model",
        description="Sums of the usage rows between two times: requests, errors (status 400 and up), "
                    "tokens in, cached and out, and what they cost. Times are a duration back from now "
                    "(24h, 7d), a UTC date or time (2026-03-01, 2026-03-01T09:00), or now.")
    usage.add_argument("--since", default="24h", metavar="WHEN", help="from when (default 24h ago)")
    usage.add_argument("--until", metavar="WHEN", help="to when (default now)")
    usage.add_argument("--by", choices=["key", "project", "model"], default="key",
                       help="what to sum by (default key)")
    usage.add_argument("--batch", action="store_true",
                       help="the lines of batches only (/v1/batches), each costed at its model's batch_discount")
    usage.set_defaults(run=run_usage)
    actions = usage.add_subparsers(dest="usage_command", metavar="ACTION")
    export = actions.add_parser(
        "export", parents=[common], help="every usage row, as CSV or JSON lines",
        description="Every usage row between two times, streamed as the store reads them, so an "
                    "export of a year needs no more memory than one of an hour.")
    export.add_argument("--format", choices=["csv", "jsonl"], required=True)
    export.add_argument("--since", default="24h", metavar="WHEN", help="from when (default 24h ago)")
    export.add_argument("--until", metavar="WHEN", help="to when (default now)")
    export.add_argument("--output", metavar="FILE",
                        help="write to FILE (with progress on stderr) instead of standard output")
    export.set_defaults(run=run_export)

    record = commands.add_parser("request", parents=[common], help="one request's usage row and its decisions",
                                 description="One request by any id its client was given: the answer's id as "
                                             "the SDK returns it (chatcmpl-…, msg_…, resp_…) or X-Request-Id: "
                                             "its key, model, tokens, cost, and what decided its path — "
                                             "the endpoint, retries, the limit or breaker that had a say.")
    record.add_argument("id")
    record.set_defaults(run=run_request)


def parse_when(text: str, flag: str, now: float | None = None) -> float:
    """"24h" (that long ago), "2026-03-01" or "2026-03-01T09:00" (UTC unless
    it says otherwise), or "now", as epoch seconds."""
    from llmgw.config import Duration

    now = time.time() if now is None else now
    text = text.strip()
    if text.lower() == "now":
        return now
    if text[:1].isdigit() and "-" in text:
        try:
            at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise AdminError(f"--{flag}: expected a date like 2026-03-01 or 2026-03-01T09:00, "
                             f"got {text!r}") from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=dt.UTC)
        return at.timestamp()
    try:
        return now - float(Duration.parse(text))
    except ValueError:
        raise AdminError(f"--{flag}: expected a duration like 24h or 7d, a date like 2026-03-01, "
                         f"or now; got {text!r}") from None


def _span(args) -> dict:
    now = time.time()
    since = parse_when(args.since, "since", now)
    until = parse_when(args.until, "until", now) if args.until else None
    if until is not None and until < since:
        raise AdminError("--until is before --since")
    return {"since": since, "until": until}


def run_usage(args) -> int:
    query = {**_span(args), "by": args.by, **({"batch": "1"} if args.batch else {})}
    answer = client(args).call("GET", "/api/v1/usage", query=query)
    if args.json:
        emit_json(answer)
        return 0
    from llmgw.account import format_money

    groups, total = answer["rows"], answer["total"]
    of = "batch lines' usage" if answer.get("batch") else "usage"
    print(f"{of} from {when(answer['since'])} to {when(answer['until'])}, by {answer['by']}")
    headers = [args.by] + (["project"] if args.by == "key" else []) + [
        "requests", "errors", "tokens in", "cached", "out", "cost"]

    def line(first: list, g: dict) -> list:
        return first + [g["requests"], g["errors"], g["prompt_tokens"], g["cached_tokens"],
                        g["completion_tokens"], format_money(g["cost_micros"])]

    rows = [line([_group_name(args.by, g["name"])] + ([g["project"] or "-"] if args.by == "key" else []), g)
            for g in groups]
    rows.append(line(["total"] + ([""] if args.by == "key" else []), total))
    table(headers, rows)
    if answer.get("note"):
        print(answer["note"])  # the admin API's, so the portal and this table say the same of the same sums
    return 0


def _group_name(by: str, name: str) -> str:
    # A request for a model the gateway does not know is kept with no model:
    # a blank first column read as a broken table (issue 11).
    return name or ("(unknown model)" if by == "model" else "-")


def run_export(args) -> int:
    span = _span(args)
    response = client(args).stream("/api/v1/usage/export", query={**span, "format": args.format})
    try:
        if not args.output:
            _copy(response, sys.stdout.buffer, args.format, None)
            sys.stdout.buffer.flush()
            return 0
        partial = f"{args.output}.partial"
        with open(partial, "wb") as out:
            rows = _copy(response, out, args.format, partial)
    finally:
        response.close()
    # Renamed only once whole: a file under its own name is never a cut-off export.
    os.replace(partial, args.output)
    print(f"\rrows written: {rows}", file=sys.stderr)
    print(f"wrote {rows} usage rows to {args.output}", file=sys.stderr)
    return 0


def _copy(response, out, fmt: str, partial: str | None) -> int:
    """Copy the export as it arrives; with a file, show rows written on stderr.

    Read in blocks rather than lines: http.client takes a connection closed
    mid-transfer for the end when read line by line, and an export cut off
    by the server must say so, not pass for a short whole one.
    """
    import http.client

    lines = 0
    shown = time.monotonic()
    header = 1 if fmt == "csv" else 0
    while True:
        try:
            block = response.read(BLOCK)
        except http.client.IncompleteRead as e:
            out.write(e.partial)
            rows = max(0, lines + e.partial.count(b"\n") - header)
            where = f"; {partial} holds the rows before it" if partial else ""
            raise AdminError(f"the export was cut off after {rows} rows (the server or its store "
                             f"stopped answering){where}") from None
        except (ConnectionError, TimeoutError):
            raise AdminError(f"the export was cut off after {max(0, lines - header)} rows "
                             "(the connection to the server was lost)") from None
        if not block:
            return max(0, lines - header)
        out.write(block)
        lines += block.count(b"\n")
        if partial and time.monotonic() - shown >= PROGRESS_EVERY:
            print(f"\rrows written: {max(0, lines - header)}", end="", file=sys.stderr, flush=True)
            shown = time.monotonic()


def run_request(args) -> int:
    row = client(args).call("GET", f"/api/v1/requests/{args.id}")
    if args.json:
        emit_json(row)
        return 0
    fields([
        ("id", row["id"]),
        ("answer id", row.get("answer_id")),
        ("when", when(row["at"]) + f" ({row['time']})"),
        ("key", f"{row['key_name']} ({row['key_id']})" if row["key_name"] else row["key_id"]),
        ("project", row["project"] or row["project_id"]),
        ("model", row["model"]),
        ("endpoint", row["endpoint"] or None),
        ("status", row["status"]),
        ("tokens", f"{row['prompt_tokens']} in ({row['cached_tokens']} cached), "
                   f"{row['completion_tokens']} out"),
        ("cost", row["cost"]),
        ("first token", None if row["ttft_ms"] is None else f"{row['ttft_ms']:.0f} ms"),
        ("took", f"{row['duration_ms']:.0f} ms"),
        ("cache", row["cache"]),
    ])
    detail = row.get("detail") or {}
    if detail:
        print("detail:")
        for name, value in detail.items():
            print(f"  {name}: {value}")
    return 0
