"""`llmgw ctl logs NODE [--source SHARD] [--lines N]`: a node's recent output, fetched by the leader.

The lines live on the node (each engine's output in a bounded ring, and the
agent's own last lines); the leader asks the node for them over its link,
so this works from the leader's machine without a shell on the node.
"""

from __future__ import annotations

import sys
from urllib.parse import quote

from llmgw.cli.output import emit_json, when

MAX_LINES = 5000


def register(sub, common) -> None:
    logs = sub.add_parser(
        "logs", parents=[common], help="a node's recent output: an engine's (--source SHARD) or its agent's",
        description="Prints the last lines a node kept: with --source, the output of that shard's engine (its "
                    "id, as llmgw ctl replicas shows it); without, the agent's own log. Asked of the node by the "
                    "leader, so run it where the leader runs; a standby names the leader.")
    logs.add_argument("node", metavar="NODE", help="its name or id")
    logs.add_argument("--source", metavar="SHARD", default="", help="a shard's id (default: the agent's own log)")
    logs.add_argument("--lines", type=int, default=200, metavar="N",
                      help=f"how many of the last lines, 1 to {MAX_LINES} (default 200)")
    logs.set_defaults(run=run_logs)


def run_logs(args) -> int:
    from llmgw.cli.ctl import client

    if not 1 <= args.lines <= MAX_LINES:
        print(f"llmgw: --lines must be from 1 to {MAX_LINES}, not {args.lines}", file=sys.stderr)
        return 2
    answer = client(args).call("GET", f"/api/v1/nodes/{quote(args.node, safe='')}/logs",
                               query={"source": args.source or None, "lines": args.lines})
    if args.json:
        emit_json(answer)
        return 0
    if not answer["lines"]:
        what = f"shard {answer['source']}" if answer["source"] else "its agent"
        print(f"node {answer['node']}: {what} has logged nothing yet", file=sys.stderr)
        return 0
    for line in answer["lines"]:
        print(f"{when(line['at'])}  {line['text']}")
    return 0
