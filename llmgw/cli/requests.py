"""`llmgw ctl requests`: the latest requests, and a live tail of them with --follow."""

from __future__ import annotations

import json
import sys
import time

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, table, when
from llmgw.cli.usage import parse_when

# How often --follow asks the admin API: a usage row is written within a
# second or so of its answer, so polling faster would show nothing sooner.
POLL_EVERY = 1.0
# How far back each poll of --follow looks for rows written since the last.
LOOK_BACK = 120.0
MOST_A_POLL = 1000
MOST_REMEMBERED = 5000
HEADERS = ["when", "request", "answer id", "key", "model", "status", "in", "out", "took"]


def register(commands, common) -> None:
    listing = commands.add_parser(
        "requests", parents=[common], help="the latest requests; --follow to watch them arrive",
        description="The latest requests, newest last, one line each: when, the request's id and its "
                    "answer's id (either finds it with `llmgw ctl request ID`), the key, model, status, "
                    "tokens and time. --follow keeps printing new requests as their rows are written "
                    "(within a second or so of each answer) until Ctrl-C.")
    listing.add_argument("--key", metavar="KEY", help="only this key's requests (its name or id)")
    listing.add_argument("--model", metavar="NAME", help="only requests for this model")
    listing.add_argument("--status", metavar="CODE",
                         help='only this status (429), or "error" for every status of 400 and up')
    listing.add_argument("--since", metavar="WHEN",
                         help="only requests from then on: a duration back (1h), a UTC date or time")
    listing.add_argument("--limit", type=int, default=20, metavar="N",
                         help="how many of the latest to show (default 20)")
    listing.add_argument("--follow", "-f", action="store_true",
                         help="then keep printing new requests as they come, until Ctrl-C")
    listing.set_defaults(run=run_requests)


def _query(args, since: float | None, limit: int) -> dict:
    return {"key": args.key, "model": args.model, "status": args.status, "since": since, "limit": limit}


def _line(row: dict) -> list:
    return [when(row["at"]), row["id"], row.get("answer_id") or "-", row.get("key_name") or row["key_id"] or "-",
            row["model"] or "(unknown model)", row["status"], row["prompt_tokens"], row["completion_tokens"],
            f"{row['duration_ms']:.0f} ms"]


def run_requests(args) -> int:
    since = parse_when(args.since, "since") if args.since else None
    admin = client(args)
    rows = list(reversed(admin.call("GET", "/api/v1/requests", query=_query(args, since, args.limit))["rows"]))
    if not args.follow:
        if args.json:
            emit_json({"rows": rows})
        elif rows:
            table(HEADERS, [_line(r) for r in rows])
        else:
            print("no requests match")
        return 0
    try:
        _follow(args, admin, rows, since)
    except KeyboardInterrupt:
        # Ctrl-C is how a tail ends, not a failure: no traceback, no message.
        print(file=sys.stderr)
    return 0


def _follow(args, admin, rows: list[dict], since: float | None) -> None:
    """Print what is there, then each new row once, oldest first, as the poll finds it.

    A row is stamped with the time its request began but written when it
    ended, so a long answer's row lands behind rows already shown. Each poll
    therefore asks for the last LOOK_BACK seconds and prints the rows not yet
    shown: an answer longer than that is missed by a tail (`ctl usage export`
    has every row).
    """
    shown: set[str] = set()
    widths = [len(h) for h in HEADERS]

    def show(batch: list[dict]) -> None:
        for row in batch:
            if row["id"] in shown:
                continue
            shown.add(row["id"])
            if args.json:
                print(json.dumps(row), flush=True)  # one JSON document a line, for a script to read as they come
                continue
            cells = [str(c) for c in _line(row)]
            for i, cell in enumerate(cells):
                widths[i] = max(widths[i], len(cell))
            print("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip(), flush=True)

    if not args.json:
        for row in rows:
            for i, cell in enumerate(_line(row)):
                widths[i] = max(widths[i], len(str(cell)))
        print("  ".join(h.upper().ljust(widths[i]) for i, h in enumerate(HEADERS)).rstrip(), flush=True)
    show(rows)
    floor = since if since is not None else time.time() - LOOK_BACK
    # Rows already there but older than the latest shown are the past, not news.
    window = admin.call("GET", "/api/v1/requests", query=_query(args, floor, MOST_A_POLL))["rows"]
    shown.update(r["id"] for r in window)
    while True:
        time.sleep(POLL_EVERY)
        start = max(floor, time.time() - LOOK_BACK)
        newer = admin.call("GET", "/api/v1/requests", query=_query(args, start, MOST_A_POLL))["rows"]
        newer.reverse()
        show(newer)
        if len(shown) > MOST_REMEMBERED:
            # A tail left running for days keeps only the ids a poll can still return.
            shown.intersection_update(r["id"] for r in newer)
