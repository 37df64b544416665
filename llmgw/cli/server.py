"""`llmgw server` (run a control plane), `server init` (set a new one up), `server add` (one of several)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from llmgw import stopsignals
from llmgw.cli.output import emit_json

# config.server's SYSTEM_CONFIG, written out: every `llmgw --help` shows it,
# and importing llmgw.config for a string cost more than the rest of the
# parser (tests/cli holds the two equal).
SYSTEM_CONFIG = "/etc/llmgw/server.yaml"

if TYPE_CHECKING:
    from aiohttp import web

    from llmgw.control import ControlPlane, Worker
    from llmgw.mcp import Gateway

KEEPALIVED_CONF = "/etc/keepalived/keepalived.conf"


def register(commands) -> None:
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--config", metavar="PATH",
                        help=f"server.yaml (default {SYSTEM_CONFIG} when it exists, else built-in defaults)")
    shared.add_argument("--store", metavar="URL", help="sqlite:PATH or postgresql://… (overrides server.yaml's store)")
    shared.add_argument("--data-dir", metavar="DIR", help="this machine's files: the admin token, the master key, "
                        "the SQLite store (overrides server.yaml's data_dir)")
    shared.add_argument("--name", help="this control plane's name (default: the host name)")
    shared.add_argument("--advertise", metavar="URL", help="the client API's address as others reach it")
    shared.add_argument("--admin-token-file", metavar="PATH", help="where the admin token is kept")
    for role, default in (("client", ":8080"), ("agent", ":7443"), ("admin", "127.0.0.1:9090"),
                          ("metrics", ":9091")):
        shared.add_argument(f"--listen-{role}", metavar="ADDR", help=f"the {role} listener (default {default})")

    server = commands.add_parser("server", parents=[shared], help="run a control plane",
                                 description="Run a control plane in the foreground until SIGINT or SIGTERM.")
    server.add_argument("--workers", type=int, metavar="N",
                        help="processes serving the client API on this machine, 1 to 64 "
                             "(overrides server.yaml's workers; default 1)")
    # The main process starting one of its workers; not for people.
    server.add_argument("--worker-of", type=int, metavar="FD", help=argparse.SUPPRESS)
    server.set_defaults(run=run_server)
    actions = server.add_subparsers(dest="action", metavar="ACTION")
    init = actions.add_parser("init", parents=[shared], help="set up a new control plane: its store, "
                              "first administrator and first API key",
                              description="Set up a new control plane. The first administrator's password "
                                          "and the first API key are printed once and kept nowhere (the "
                                          "password also in --keep-password's file, when given). The "
                                          "cluster's first settings are server.yaml's, with the baseline "
                                          "guardrail policy on every request (secrets refused both ways, card "
                                          "numbers masked, injection attempts recorded) unless server.yaml "
                                          "has guard policies of its own.")
    init.add_argument("--admin-email", default="admin@localhost", help="the first administrator's e-mail")
    init.add_argument("--project", default="Default/default/default",
                      help="ORG/TEAM/PROJECT of the first API key")
    init.add_argument("--token-holder", default="admin", metavar="NAME",
                      help="who holds the admin token, as the audit log names whoever uses it (default admin); "
                           "set when the token is made")
    init.add_argument("--keep-password", metavar="FILE",
                      help="also keep the first administrator's e-mail and password in FILE, readable by its "
                           "owner only (0600), so that a later run can say them: build.py run keeps them in "
                           "./var/first-admin")
    init.add_argument("--webhook", metavar="URL",
                      help="where the cluster's events go from the start (a budget spent, a node lost, …): a "
                           "webhook, added as `llmgw ctl webhooks add` adds one (docs/webhooks.md)")
    init.add_argument("--webhook-format", choices=("json", "slack"), default="json",
                      help="send it each event as JSON (default), or as a message for Slack, Mattermost or "
                           "Rocket.Chat")
    init.add_argument("--webhook-allow-private", action="store_true",
                      help="send it to a loopback or link-local address all the same (refused otherwise, as "
                           "`ctl webhooks add --allow-private` says)")
    init.add_argument("--json", action="store_true", help="print one JSON document")
    _install_flags(init)
    init.set_defaults(run=run_init)
    # Not `shared`: of server.yaml, only the client listener (where /leader
    # is asked) matters here.
    add = actions.add_parser("add", help="install a standby control plane over SSH, or make this machine one of "
                             "several: keepalived's configuration for a floating address that follows the leader",
                             description="With --ssh USER@HOST: install a standby control plane there that "
                                         "shares this one's PostgreSQL store and master key "
                                         "(docs/ssh-installs.md). With --vip: write keepalived's configuration "
                                         "for a floating address held by whichever control plane leads (it asks "
                                         "/leader every second). Run it with the same --vip on every control "
                                         "plane, then reload keepalived on each. docs/ha.md says how the "
                                         "address moves.")
    add.add_argument("--config", metavar="PATH",
                     help=f"server.yaml (default {SYSTEM_CONFIG} when it exists): listen.client for --vip; "
                          "the store and the data directory (its master key) for --ssh")
    add.add_argument("--listen-client", metavar="ADDR",
                     help="the client listener, where keepalived asks /leader (default server.yaml's, or :8080)")
    add.add_argument("--vip", metavar="ADDR/LEN",
                     help="the floating address with its network's prefix length, e.g. 10.0.0.160/24")
    add.add_argument("--interface", metavar="IF",
                     help="the interface on that network (default: the one this machine routes the address through)")
    add.add_argument("--priority", type=int, default=100, metavar="N",
                     help="100 to 150: which standby keeps the address while none leads (default 100)")
    add.add_argument("--keepalived-conf", metavar="PATH", default=KEEPALIVED_CONF,
                     help=f"where to write keepalived's configuration (default {KEEPALIVED_CONF})")
    add.add_argument("--print", action="store_true", dest="print_only",
                     help="print the configuration instead of writing it")
    add.add_argument("--force", action="store_true", help="replace a configuration llmgw did not write")
    add.add_argument("--json", action="store_true", help="print one JSON document")
    from llmgw.cli.sshinstall import ssh_options

    ssh_options(add, "the standby")
    add.add_argument("--name", help="with --ssh: the standby's name (default: its host name)")
    add.add_argument("--standby-listen", action="append", metavar="ROLE=ADDR",
                     help="with --ssh: one of the standby's listeners (client, agent, admin, metrics), e.g. "
                          "client=:8080; repeat for several (default: those of server.yaml's defaults)")
    add.set_defaults(run=run_add, store=None, data_dir=None, advertise=None, admin_token_file=None,
                     listen_agent=None, listen_admin=None, listen_metrics=None)


def load(args) -> tuple:
    """server.yaml with the command line's flags on top, validated as one document,
    and the cluster's keys the file sets itself."""
    from llmgw.config import cluster_keys_in

    cfg, raw = _load(args)
    return cfg, cluster_keys_in(raw)


def _load(args) -> tuple:
    """The validated configuration and server.yaml as written (an empty dict without one)."""
    from llmgw.config import ConfigError, ServerConfig, from_dict, load_server_config, parse_yaml, to_dict

    path = args.config or (SYSTEM_CONFIG if os.path.exists(SYSTEM_CONFIG) else None)
    cfg = load_server_config(path)
    raw: dict[str, Any] = {}
    if path:
        with open(path, encoding="utf-8") as f:
            raw = parse_yaml(f.read()) or {}
    doc = to_dict(cfg)
    flags = {
        "store": args.store, "data_dir": args.data_dir, "name": args.name,
        "advertise": args.advertise, "admin_token_file": args.admin_token_file,
        "workers": getattr(args, "workers", None),
    }
    for key, value in flags.items():
        if value is not None:
            doc[key] = value
    if not args.store and not (raw.get("store") if isinstance(raw, dict) else None):
        # No store named anywhere: the SQLite store in the data directory in force, the command
        # line's or server.yaml's (ServerConfig makes it from data_dir).
        doc["store"] = ""
    for role in ("client", "agent", "admin", "metrics"):
        value = getattr(args, f"listen_{role}")
        if value is not None:
            doc["listen"][role] = value
    try:
        cfg = from_dict(ServerConfig, doc)
    except ConfigError as e:
        where = path or "the command line"
        raise ConfigError(f"{where}: {e}") from None
    return cfg, raw


class _ClientPort:
    """What floor 2 adds to the control plane's apps: /mcp (docs/mcp.md), then the portal's pages
    (docs/portal.md), whose catch-all must come after /mcp; and the MCP servers' admin routes.
    One a process: the admin routes tell the gateway this process serves, if any, of a change.
    Typed with the two processes that hand it their apps, so that mypy holds each to the Protocols
    the portal and the MCP gateway read them by (llmgw.portal.PortalPlane, llmgw.mcp.McpPlane)."""

    def __init__(self) -> None:
        self.gateway: Gateway | None = None  # once the client app is mounted here

    def __call__(self, app: web.Application, plane: ControlPlane | Worker) -> None:
        from llmgw.mcp import PortalServers
        from llmgw.mcp import mount as mount_mcp
        from llmgw.portal import mount as mount_portal

        self.gateway = mount_mcp(app, plane)
        # The portal's /admin/mcp changes servers through the same calls as the admin routes, telling this
        # process's gateway (and, in the main process, its workers') as they do.
        mount_portal(app, plane, mcp=PortalServers(plane, lambda: self._told(plane), self.gateway))

    def admin(self, app: web.Application, plane: ControlPlane) -> None:
        from llmgw.mcp import mount_admin

        mount_admin(app, plane, lambda: self._told(plane))

    def _told(self, plane) -> None:
        """The admin API changed the MCP servers: this process's gateway, and its workers', read them now."""
        self.changed("mcp")
        if getattr(plane, "workers", None) is not None:
            plane.workers.part_changed("mcp")

    def changed(self, part: str) -> None:
        if part == "mcp" and self.gateway is not None:
            self.gateway.changed()


@stopsignals.taken_by_the_program
def run_server(args) -> int:
    import asyncio

    from llmgw import logsetup
    from llmgw.control import WorkerFailed, load_server_plugins, run_worker, serve
    if args.worker_of is not None:
        # Each worker routes and guards requests itself, so it needs the plugins
        # too; the main process has already warned of any that failed.
        load_server_plugins(quiet=True)
        _install_uvloop()
        return asyncio.run(run_worker(args.worker_of, extend=_ClientPort()))
    cfg, seeded = load(args)
    logsetup.setup(cfg.log.level, cfg.log.format)
    plugins = load_server_plugins()  # after the log is set up: a broken plugin's warning goes to the server's log
    _install_uvloop()
    try:
        asyncio.run(serve(cfg, seeded, plugins, extend=_ClientPort()))
    except WorkerFailed as e:
        print(f"llmgw: {e}", file=sys.stderr)
        return 1
    return 0


def _install_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # not built for this platform; asyncio's own loop does the same work
        pass


def _install_flags(init: argparse.ArgumentParser) -> None:
    """`server init --install`: the whole install the setup screens do, as flags."""
    from llmgw.cli import sshinstall
    from llmgw.onboard import MIRROR_DIR, MIRROR_LISTEN, STARTERS

    g = init.add_argument_group("the whole install (--install), as the setup screens do it")
    g.add_argument("--install", action="store_true",
                   help="install this machine: the program, the llmgw user, server.yaml and agent.yaml, the store, "
                        "the services, this machine as a node, the starter model and a first answer; "
                        "each step can be run again and changes nothing the second time")
    g.add_argument("--root", metavar="DIR", help="install under DIR instead of / (a test, a trial run)")
    g.add_argument("--services", choices=("systemd", "supervised"),
                   help="how the services run (default: systemd on a real machine, supervised otherwise)")
    g.add_argument("--no-node", action="store_true", help="leave out this machine as a node")
    g.add_argument("--no-model", action="store_true", help="leave out the starter model")
    g.add_argument("--starter", metavar="NAME", default="qwen2.5-0.5b",
                   help=f"the starter model: {', '.join(s.key for s in STARTERS)} (sim is simulated: no "
                        "internet, no weights), or hf:OWNER/REPO/FILE.gguf (default qwen2.5-0.5b)")
    g.add_argument("--starter-context", type=int, default=4096, metavar="TOKENS",
                   help="the starter model's context (default 4096)")
    g.add_argument("--bundle", metavar="FILE",
                   help="install from an offline bundle (`python3 build.py dist --bundle`): its program, and its "
                        "engine wheels for the nodes, asking no registry; give --bundle-sha256 too")
    g.add_argument("--bundle-sha256", metavar="HEX", default="",
                   help="the bundle's sha256 as its maker published it: a file that differs is refused")
    g.add_argument("--no-judge", action="store_true",
                   help="leave out the guardrails' judge (else placed on this machine when it has room, and asked "
                        "by the baseline policy: docs/guardrails.md)")
    g.add_argument("--judge", choices=("qwen3guard-0.6b", "sim"), metavar="MODEL",
                   help="the judge: qwen3guard-0.6b, or sim (simulated: no internet, no weights); default "
                        "qwen3guard-0.6b, or sim beside a simulated starter")
    g.add_argument("--judge-replicas", type=int, default=0, metavar="N",
                   help="copies of the judge (default one on one machine, on up to four cores; two with three "
                        "machines, two cores each)")
    g.add_argument("--mirror", action="store_true",
                   help="install the model mirror on this machine (and, with --ha, on the second): it fetches each "
                        "model from Hugging Face once and the nodes fetch from it only (docs/mirror.md)")
    g.add_argument("--mirror-dir", default=MIRROR_DIR, metavar="DIR",
                   help=f"where the mirror keeps the files: the largest disk (default {MIRROR_DIR})")
    g.add_argument("--mirror-listen", default=MIRROR_LISTEN, metavar="ADDR",
                   help=f"where the mirror listens for the nodes, over mutual TLS (default {MIRROR_LISTEN})")
    g.add_argument("--no-firewall", action="store_true",
                   help="leave out the firewall (an install into a directory, --root, leaves it out anyway)")
    g.add_argument("--language", default="en", choices=("en", "tr"), help="the portal's language (default en)")
    g.add_argument("--max-key-ttl", default="", metavar="DURATION",
                   help="the longest lifetime of a new API key, e.g. 90d (default: no limit)")
    ha = init.add_argument_group("three machines (--install --ha), each a control plane on one store under "
                                 "Patroni (docs/ha.md#three-machines)")
    ha.add_argument("--ha", metavar="USER@HOST2,USER@HOST3",
                    help="the other two machines, by IP address, logged in to over SSH; this machine is the first")
    ha.add_argument("--address", metavar="IP", help="the address the other two reach this machine at (default: "
                                                    "the one its route toward the second uses)")
    ha.add_argument("--machines", metavar="FILE",
                    help="instead of --ha: the three as a YAML list, this machine first, each with name, address, "
                         "ssh (the other two), and where not the defaults its root, store ports and listeners")
    ha.add_argument("--vip", metavar="ADDR/LEN", default="",
                    help="a floating address held by whichever control plane leads: keepalived on the three "
                         "(docs/ha.md#a-floating-address-with-keepalived)")
    ha.add_argument("--vip-interface", metavar="IF",
                    help="the interface for the floating address (default: the one that holds the route to it)")
    ha.add_argument("--judge-node", action="append", metavar="USER@HOST", dest="judge_nodes",
                    help="a machine for the guardrails' judges alone (up to two, repeat): added as a node "
                         "labelled llmgw.role=judge, one judge on each (in --machines FILE: role: judge)")
    sshinstall.login_options(ha)
    sshinstall.copy_options(ha, "each standby control plane")


def run_install(args) -> int:
    from pathlib import Path

    from llmgw.onboard import LISTEN_DEFAULTS, Choices, Layout, install, service_manager

    given = [f for f, v in (("--config", args.config), ("--store", args.store), ("--data-dir", args.data_dir),
                            ("--admin-token-file", args.admin_token_file)) if v]
    if given:
        print(f"llmgw: {', '.join(given)} go with the store-only `server init`; --install writes its own "
              "server.yaml under --root (leave them out, or leave out --install)", file=sys.stderr)
        return 2
    choices = Choices(admin_email=args.admin_email, language=args.language, starter=args.starter,
                      starter_context=args.starter_context, max_key_ttl=args.max_key_ttl,
                      root=args.root or "/", services=args.services, mirror_dir=args.mirror_dir,
                      mirror_listen=args.mirror_listen, judge=args.judge or "", judge_replicas=args.judge_replicas,
                      bundle=os.path.abspath(args.bundle) if args.bundle else "", bundle_sha256=args.bundle_sha256)
    choices.on.update({"node": not args.no_node, "starter": not args.no_model, "mirror": args.mirror,
                       "notify": bool(args.webhook)})
    if args.no_judge:
        choices.on["judge"] = False
    if args.bundle:
        choices.on["bundle"] = True
    choices.webhook, choices.webhook_format = args.webhook or "", args.webhook_format
    choices.webhook_private = args.webhook_allow_private
    if args.no_firewall:
        choices.on["firewall"] = False  # else on for the machine itself, off for a directory (Choices.default_on)
    for role in LISTEN_DEFAULTS:
        if getattr(args, f"listen_{role}") is not None:
            choices.listen[role] = getattr(args, f"listen_{role}")
    if args.ha or args.machines:
        return _install_ha(args, choices)
    if any(getattr(args, flag) for flag in HA_ONLY):
        print("llmgw: --address, --vip, --key, --password, --sudo-password, --program, --known-hosts and "
              "--judge-node are for three machines; give --ha USER@HOST2,USER@HOST3 too (on one machine, add a "
              "judge's machine later: llmgw node add --ssh USER@HOST --label llmgw.role=judge)", file=sys.stderr)
        return 2
    choices.check()
    layout = Layout(Path(choices.root))
    # With --json the progress goes to stderr as JSON lines: stdout is the one document at the end.
    if args.json:
        def report(p) -> None:
            print(p.line(), file=sys.stderr, flush=True)
    else:
        def report(p) -> None:
            print(p.shown(), flush=True)
    result = install(choices, layout, service_manager(layout, choices.services), report)
    return _installed(args, result)


def _installed(args, result, standbys: list | None = None, store: str = "") -> int:
    if args.json:
        emit_json({"portal": result.portal, "client_api": result.client_api, "admin_email": result.admin_email,
                   "password": result.password, "api_key": result.api_key, "model": result.model,
                   "answer": result.answer, "admin_token_file": result.admin_token_file, "steps": result.steps,
                   "judge": result.judge, "judge_speed": result.judge_speed,
                   **({"standbys": standbys, "store": store} if standbys is not None else {})})
        return 0
    print("\nllmgw is installed." + (" The password and key are shown once and kept nowhere: copy them now."
                                     if result.password else "") + "\n")
    print(f"  portal          {result.portal}")
    print(f"  client API      {result.client_api}")
    print(f"  administrator   {result.admin_email}  password "
          f"{result.password or '(set before; llmgw people reset-password makes a new one)'}")
    if result.api_key:
        print(f"  API key         {result.api_key}")
    if result.model:
        answered = f", which answered: {result.answer[:60]}" if result.answer else ""
        print(f"  model           {result.model}{answered}")
    if result.judge:
        print(f"  judge           {result.judge}, asked by the baseline policy" + (
            f": {result.judge_speed}" if result.judge_speed else ""))
    if standbys is not None:
        print(f"  store           {store}")
        for standby in standbys:
            print(f"  standby         {standby['name']}, answering {standby['health']}")
    return 0


HA_ONLY = ("address", "vip", "vip_interface", "key", "password", "sudo_password", "program", "known_hosts",
           "judge_nodes")


def _install_ha(args, choices) -> int:
    import asyncio
    from pathlib import Path

    from llmgw.cli.sshinstall import credentials
    from llmgw.onboard import (
        MOST_JUDGE_MACHINES,
        HaJob,
        Layout,
        Machine,
        from_file,
        from_hosts,
        install_ha,
        judges_from_hosts,
        program_file,
    )

    if args.ha and args.machines:
        print("llmgw: give the other two machines either with --ha or in --machines FILE, not both", file=sys.stderr)
        return 2
    machines, judges = (from_file(Path(args.machines)) if args.machines
                        else (from_hosts([h.strip() for h in args.ha.split(",") if h.strip()], args.address), []))
    judges += judges_from_hosts(args.judge_nodes or [])
    if len(judges) > MOST_JUDGE_MACHINES:
        print(f"llmgw: {len(judges)} machines are given for the judges (--judge-node and role: judge in "
              f"--machines); up to {MOST_JUDGE_MACHINES} take them", file=sys.stderr)
        return 2
    here = machines[0]
    login = credentials(args, "the other two machines' login")
    auth = "key" if args.key else "password" if args.password else "agent"
    # What the setup screens ask of the other two, filled from the flags: the same checks for both.
    choices.machines = 3
    choices.vip = args.vip
    choices.judge_nodes = [str(j.ssh) for j in judges]
    choices.others = [Machine(address=m.ssh.host, user=m.ssh.user, auth=auth, key_path=args.key or "",
                              password=login.password or "", sudo_password=login.sudo_password or "")
                      for m in machines[1:] if m.ssh is not None]
    if here.root != "/" and not args.root:
        choices.root = here.root
    choices.listen.update(here.listen)
    if here.mirror_listen:
        choices.mirror_listen = here.mirror_listen
    choices.check()
    layout = Layout(Path(choices.root))
    known_hosts = Path(args.known_hosts) if args.known_hosts else layout.server_data / "known_hosts"
    job = HaJob(machines=machines, credentials=login,
                known_hosts=known_hosts, program=program_file(args.program),
                services=args.services or ("supervised" if any(m.root != "/" for m in machines[1:]) else None),
                wait=args.wait, vip_interface=args.vip_interface, judges=judges)
    if args.json:
        def report(p) -> None:
            print(p.line(), file=sys.stderr, flush=True)
    else:
        def report(p) -> None:
            if p.state != "doing":
                print(p.shown(), flush=True)
    done = asyncio.run(install_ha(choices, job, report))
    return _installed(args, done["result"], done["standbys"], done["store"])


def run_init(args) -> int:
    import asyncio

    from llmgw.account import parse_project_path

    if args.install:
        return run_install(args)
    from llmgw.onboard import FirstWebhook, init_server

    cfg, raw = _load(args)
    parse_project_path(args.project)
    file_guard = raw.get("guard") if isinstance(raw.get("guard"), dict) else None
    webhook = FirstWebhook(args.webhook, args.webhook_format, args.webhook_allow_private) if args.webhook else None
    result = asyncio.run(init_server(cfg, admin_email=args.admin_email, project=args.project,
                                     file_guard=file_guard, token_holder=args.token_holder, webhook=webhook))
    kept = args.keep_password
    if kept and not result["already"]:
        _keep_password(kept, result["administrator"]["email"], result["administrator"]["password"])
    if args.json:
        emit_json({**result, "password_kept_in": kept} if kept else result)
        return 0
    if result["already"]:
        people = result["people"]
        here = f"llmgw is already set up here ({people} {'person' if people == 1 else 'people'})"
        # Said only when true: build.py run prints the kept password next, and "no secret is printed again"
        # followed by it was a mixed message (issue 25).
        if kept and os.path.exists(kept):
            print(f"{here}; no API key is made, and the first administrator's password is kept in {kept}.")
        else:
            print(f"{here}; no secret is printed again.")
        if args.webhook:
            # init sets up a store once; a webhook given to a second run would otherwise seem added.
            print(f"The webhook was not added: this store was set up before. Add it with:\n"
                  f"  llmgw ctl webhooks add {args.webhook}")
        print(f"The admin token is in {result['admin_token_file']}. Make an API key with:")
        print("  llmgw keys create NAME --project ORG/TEAM/PROJECT")
        return 0
    port = cfg.listen.client.port
    host = cfg.listen.client.host if not cfg.listen.client.all_interfaces else "127.0.0.1"
    key = result["key"]
    admin = result["administrator"]
    out = sys.stdout
    if kept:
        out.write(f"llmgw is set up. The API key is shown once and kept nowhere: copy it now. The administrator's "
                  f"password is kept in {kept}, readable by you only.\n\n")
    else:
        out.write("llmgw is set up. These secrets are shown once and kept nowhere: copy them now.\n\n")
    out.write(f"  client API      http://{host}:{port}/v1\n")
    out.write(f"  administrator   {admin['email']}  password {admin['password']}\n")
    out.write(f"  API key         {key['key']}  (project {key['project']})\n")
    out.write(f"  admin token     {result['admin_token_file']}  (held by {result['token_holder']})\n")
    out.write(f"  guardrails      {_guard_line(result['guard'])}\n")
    if result.get("webhook"):
        hook = result["webhook"]
        out.write(f"  notifications   every event to {hook['url']} ({hook['format']}; llmgw ctl webhooks test "
                  f"{hook['id']} sends one now)\n")
    from llmgw.kb import where_line

    out.write(f"  knowledge bases {where_line(cfg.store, cfg.router.knowledge.embedding_model)}\n\n")
    out.write(f"Try it once the server runs:\n  curl -H 'Authorization: Bearer {key['key']}' "
              f"http://{host}:{port}/v1/models\n")
    return 0


def _keep_password(path: str, email: str, password: str) -> None:
    """EMAIL PASSWORD in PATH, written 0600 from the start: the password is never readable by others, even for a
    moment. One line, as build.py run reads it back."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file there already keeps its mode otherwise
    with os.fdopen(fd, "w") as out:
        out.write(f"{email} {password}\n")


def run_add(args) -> int:
    import shutil

    from llmgw.cli import sshinstall
    from llmgw.onboard import check_interface, interface_toward, keepalived

    if args.ssh:
        name, args.name = args.name, None  # --name is the standby's, not this control plane's
        cfg, _ = _load(args)
        args.name = name
        return sshinstall.run_server_add_ssh(args, cfg)
    if sshinstall.ssh_flags_without_ssh(args):
        return 2
    if not args.vip:
        print("llmgw: server add needs --vip ADDR/LEN (the floating address), or --ssh USER@HOST to install a "
              "standby there", file=sys.stderr)
        return 2
    cfg, _ = _load(args)
    vip = keepalived.parse_vip(args.vip)
    interface = check_interface(args.interface) if args.interface else interface_toward(vip)
    address = keepalived.FloatingAddress(vip=vip, interface=interface,
                                         priority=keepalived.check_priority(args.priority),
                                         check_url=keepalived.leader_url(cfg.listen.client))
    path = args.keepalived_conf
    if args.print_only:
        text = keepalived.render(address, shutil.which("curl") or "/usr/bin/curl")
    else:
        text = keepalived.render(address, keepalived.find_curl())
        keepalived.write(path, text, force=args.force)
    # keepalived on Debian does not start without a configuration, so the
    # first time there is nothing to reload: reload-or-restart starts it.
    installed = shutil.which("keepalived") is not None
    step = ("systemctl reload-or-restart keepalived" if installed
            else "apt-get install keepalived  (it starts with this file)")
    result = {"path": path, "written": not args.print_only, "vip": str(vip), "interface": interface,
              "virtual_router_id": address.router_id, "priority": address.priority,
              "check": address.check_url, "next": None if args.print_only else step}
    if args.json:
        if args.print_only:
            result["config"] = text
        emit_json(result)
        return 0
    if args.print_only:
        sys.stdout.write(text)
        return 0
    print(f"Wrote {path}: the floating address {vip} on {interface}, VRRP router id {address.router_id}, "
          f"held while {address.check_url} answers 200.")
    print("Run the same command on every control plane, then on each:")
    print(f"  {step}")
    return 0


def _guard_line(guard: dict) -> str:
    default = ", ".join(guard["default"]) or "none"
    if not guard["enabled"]:
        return f"off (guard.enabled is false); on, these apply to every request: {default}"
    return {
        "installed": "the baseline policy on every request: secrets refused, card numbers masked, "
                     "injection attempts recorded (docs/guardrails.md)",
        "defined": f"the baseline policy is defined; server.yaml's guard.default applies: {default}",
        "kept": f"server.yaml's own policies, the baseline left out; on every request: {default}",
        "store": f"the store's settings, kept as they were; on every request: {default}",
    }[guard["baseline"]]
