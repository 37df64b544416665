"""`llmgw` with no command (and `llmgw console`): open what fits this machine.

A control plane (a server.yaml, or the admin token it makes) opens the
console; a node (an agent.yaml) opens the node's overview; a machine with
neither opens the setup screens (llmgw.console.setup, imported only then).
The flags choose for tests and for installs kept somewhere else.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from llmgw.errors import ExpectedError

SYSTEM_AGENT_CONFIG = "/etc/llmgw/agent.yaml"


@dataclass(frozen=True)
class Choice:
    what: str  # "console" | "node" | "setup"
    config: str = ""  # the server.yaml or agent.yaml it was chosen by, when one


def choose(*, config: str | None = None, admin: str | None = None, token_file: str | None = None,
           agent_config: str | None = None, system_server: str | None = None,
           system_agent: str = SYSTEM_AGENT_CONFIG) -> Choice:
    """What `sudo llmgw` opens here, first found wins: the flags, then what is installed.

    A control plane is known by its server.yaml ($LLMGW_CONFIG, or
    /etc/llmgw/server.yaml) or by an admin token llmgw ctl would find (a
    checkout's var/admin-token); a node by /etc/llmgw/agent.yaml. A machine
    that is both opens the console, from which the cluster is run.
    """
    from llmgw.config import SYSTEM_CONFIG
    from llmgw.control import token_file as found_token

    system_server = system_server or SYSTEM_CONFIG
    if config or admin or token_file:
        return Choice("console", config or "")
    if agent_config:
        return Choice("node", agent_config)
    if os.environ.get("LLMGW_CONFIG") or os.path.exists(system_server):
        return Choice("console", os.environ.get("LLMGW_CONFIG") or system_server)
    if os.path.exists(found_token(None)):
        return Choice("console")
    if os.path.exists(system_agent):
        return Choice("node", system_agent)
    return Choice("setup")


def admin_client(choice: Choice, admin: str | None, token_file: str | None):
    """The AdminClient for the console: the flags first, then the server.yaml chosen by."""
    from llmgw.config import ConfigError, load_server_config
    from llmgw.control import AdminClient

    if choice.config and not (admin and token_file):
        try:
            cfg = load_server_config(choice.config)
        except (OSError, ConfigError) as e:
            raise ExpectedError(f"{choice.config} cannot be read: {e}") from None
        listen = cfg.listen.admin
        host = "127.0.0.1" if listen.all_interfaces else listen.host
        admin = admin or (f"[{host}]:{listen.port}" if ":" in host else f"{host}:{listen.port}")
        token_file = token_file or cfg.admin_token_path
    return AdminClient(admin, token_file, timeout=10.0, via="console")


def run(args) -> int:
    choice = choose(config=args.config, admin=args.admin, token_file=args.admin_token_file,
                    agent_config=args.agent_config)
    if choice.what == "setup":
        from llmgw.console.setup import run_setup  # type: ignore[import-untyped,unused-ignore]  # another part's

        return run_setup(args)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("llmgw: the console needs a terminal; run it in one (ssh -t for a remote machine), or use the "
              "commands each screen names, such as llmgw ctl status", file=sys.stderr)
        return 1
    from llmgw.console.ui import App

    if choice.what == "node":
        from llmgw.config import ConfigError, load_agent_config
        from llmgw.console.node import NodeOverview

        try:
            cfg = load_agent_config(choice.config)
        except (OSError, ConfigError) as e:
            raise ExpectedError(f"{choice.config} cannot be read: {e}") from None
        from llmgw.console.manual import Manual

        App([NodeOverview(choice.config, cfg), Manual()], heading=f"llmgw node {cfg.node_name}").run()
        return 0
    from llmgw.console.guardrails import Guardrails
    from llmgw.console.manual import Manual
    from llmgw.console.models import Models
    from llmgw.console.nodes import Nodes
    from llmgw.console.overview import Overview
    from llmgw.console.people import People
    from llmgw.console.settings import Settings
    from llmgw.console.signin import SignIn

    client = admin_client(choice, args.admin, args.admin_token_file)
    client.token()  # no token: one sentence now, rather than the same on every screen
    App([Overview(client), Models(client), Nodes(client), SignIn(client), People(client), Guardrails(client),
         Settings(client), Manual()], heading="llmgw console").run()
    return 0
