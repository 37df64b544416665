"""`llmgw ctl fabric-test NODE NODE [--size SIZE]`: the link between two nodes, measured (docs/large-models.md)."""

from __future__ import annotations

import sys

from llmgw.cli.output import emit_json


def register(sub, common) -> None:
    test = sub.add_parser(
        "fabric-test", parents=[common], help="measure the link between two nodes: latency and bandwidth",
        description="The leader has the second node listen and the first connect to it, over plain TCP as a "
                    "model split over nodes talks, then times round trips of a byte (latency) and the receipt of "
                    "--size bytes (bandwidth). Run where the leader runs; a standby names the leader.")
    test.add_argument("source", metavar="NODE", help="the node that connects and receives (name or id)")
    test.add_argument("target", metavar="NODE", help="the node that listens and sends")
    test.add_argument("--size", default="256MB", metavar="SIZE",
                      help="how much to send, like 256MB or 4GB (default 256MB)")
    test.add_argument("--pings", type=int, default=20, metavar="N", help="round trips timed (default 20)")
    test.set_defaults(run=run_fabric_test)


def run_fabric_test(args) -> int:
    from llmgw.cli.ctl import client
    from llmgw.config import Size

    try:
        size = int(Size(args.size))
    except ValueError as e:
        print(f"llmgw: --size: {e}", file=sys.stderr)
        return 2
    answer = client(args).call("POST", "/api/v1/fabric-test",
                               {"from": args.source, "to": args.target, "bytes": size, "pings": args.pings})
    if args.json:
        emit_json(answer)
        return 0
    latency = answer["latency_ms"]
    print(f"{answer['from']} <- {answer['to']} ({answer['address']})")
    print(f"  latency    {latency['median']:.3f} ms median of {answer['pings']} round trips "
          f"({latency['min']:.3f} to {latency['max']:.3f})")
    print(f"  bandwidth  {answer['bytes_per_second'] * 8 / 1e9:.2f} Gb/s ({answer['bytes_per_second'] / 1e6:.0f} MB/s: "
          f"{answer['bytes'] / 2**20:.0f} MiB in {answer['seconds']:.2f} s)")
    return 0
