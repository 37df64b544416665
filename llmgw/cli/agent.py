"""`llmgw agent`: run this machine as a node of the cluster."""

from __future__ import annotations

import os
import sys

from llmgw import stopsignals

DEFAULT_CONFIG = "/etc/llmgw/agent.yaml"


def register(commands) -> None:
    agent = commands.add_parser(
        "agent", help="run this machine as a node: report it, fetch weights, run engines",
        description="Connects to the cluster's leader over the agent port (mutual TLS, with the certificate "
                    "`llmgw join` gave this node), reports the node's hardware, and runs the engines the "
                    "leader places here as child processes. Engines keep running when the agent stops or "
                    "restarts, and a restarted agent adopts them.")
    agent.add_argument("--config", metavar="PATH",
                       help=f"agent.yaml (default {DEFAULT_CONFIG} where it exists, else every default)")
    agent.add_argument("--stop-engines", action="store_true",
                       help="stop this node's engines when the agent stops (taking the node out of service)")
    agent.set_defaults(run=run)


@stopsignals.taken_by_the_program
def run(args) -> int:
    import asyncio

    from llmgw import logsetup
    from llmgw.config import ConfigError, load_agent_config
    from llmgw.trust import TrustError

    path = args.config or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
    try:
        cfg = load_agent_config(path)
    except ConfigError as e:
        print(f"llmgw: {e}", file=sys.stderr)
        return 1
    logsetup.setup(cfg.log.level, cfg.log.format)
    if not cfg.control_planes:
        print(f"llmgw: {path or 'agent.yaml'} names no control plane; run `llmgw join CODE` on this node "
              "(`llmgw node add` on a control plane prints the code)", file=sys.stderr)
        return 1
    from llmgw.agent import AgentAlreadyRunning, serve

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(cfg, stop_engines=args.stop_engines))
    except (TrustError, AgentAlreadyRunning) as e:
        print(f"llmgw: {e}", file=sys.stderr)
        return 1
    return 0
