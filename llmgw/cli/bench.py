"""`llmgw ctl bench overhead`: what the gateway adds to a request, measured on this machine."""

from __future__ import annotations

import sys

from llmgw.cli.output import emit_json


def register(ctl_commands) -> None:
    bench = ctl_commands.add_parser("bench", help="measure this machine")
    sub = bench.add_subparsers(dest="bench_command", metavar="WHAT")
    overhead = sub.add_parser(
        "overhead", help="the latency and CPU the gateway adds, against an instant engine",
        description="Starts an instant sim-engine and a gateway in front of it on loopback, sends the same "
                    "load straight to the engine and through the gateway (authentication and accounting "
                    "on), and prints what the gateway added: p50/p99 at concurrency 1 and 32, requests and "
                    "64-token streams a second, and the gateway's CPU per thousand requests. The guard step "
                    "runs concurrency 1 again with the baseline guardrail policy on every request, in slices "
                    "alternating with slices of it off, and prints what the policy costs over those. Where "
                    "nginx is installed, c1, c32 and 64-token streams run again through a gateway in front "
                    "of nginx serving fixed answers: the gateway's own figures. Nothing leaves this machine.")
    overhead.add_argument("--seconds", type=float, default=5.0, help="how long each step runs (default 5)")
    overhead.add_argument("--traces", action="store_true",
                          help="also run concurrency 1 in slices taking turns with tracing off, at sample_ratio 0 "
                               "and at 1 (every request's spans sent to a collector on loopback), and print what "
                               "ratio 0 and ratio 1 cost over it off")
    overhead.add_argument("--json", action="store_true", help="print one JSON document at the end")
    overhead.set_defaults(run=run_overhead)


def run_overhead(args) -> int:
    from llmgw.benchmark.overhead import overhead

    if not 0.2 <= args.seconds <= 600:
        print("llmgw: --seconds must be between 0.2 and 600", file=sys.stderr)
        return 2
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    results = overhead(seconds=args.seconds, say=say, traces=args.traces)
    if args.json:
        emit_json(results)
    return 0
