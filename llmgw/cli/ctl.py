"""`llmgw ctl`: the administrator's commands, over the admin API."""

from __future__ import annotations

import json
import os
import time

from llmgw.cli.output import emit_json, fields, table, when
from llmgw.control import AdminClient, AdminError


def client(args) -> AdminClient:
    return AdminClient(args.admin, args.token_file)


def register(commands, common) -> None:
    ctl = commands.add_parser("ctl", help="administer a running control plane",
                              description="Administer the cluster through this machine's control plane.")
    sub = ctl.add_subparsers(dest="ctl_command", metavar="COMMAND")
    from llmgw.cli import bench

    bench.register(sub)

    status = sub.add_parser("status", parents=[common],
                            help="this control plane, the leader, the store and the plugins it loaded")
    status.set_defaults(run=run_status)

    config = sub.add_parser("config", help="the cluster's settings (in force everywhere within 5 s)")
    csub = config.add_subparsers(dest="config_command", metavar="ACTION")
    get = csub.add_parser("get", parents=[common], help="print the settings, or one key")
    get.add_argument("path", nargs="?", help="a dotted key, e.g. router.cache.max_bytes")
    get.set_defaults(run=run_config_get)
    set_ = csub.add_parser("set", parents=[common], help="change keys: PATH VALUE [PATH VALUE …]")
    set_.add_argument("pairs", nargs="+", metavar="PATH VALUE")
    set_.set_defaults(run=run_config_set)
    unset = csub.add_parser("unset", parents=[common], help="put keys back to their defaults")
    unset.add_argument("paths", nargs="+", metavar="PATH")
    unset.set_defaults(run=run_config_unset)
    edit = csub.add_parser("edit", parents=[common], help="edit the whole document in $EDITOR")
    edit.set_defaults(run=run_config_edit)

    audit = sub.add_parser("audit", parents=[common], help="who changed what, before and after")
    audit.add_argument("--limit", type=int, default=50, help="how many entries (default 50)")
    audit.add_argument("--since", metavar="DURATION", help="only the last DURATION, e.g. 24h")
    audit.add_argument("--target", help="only changes to this, e.g. key:key_0123abcd")
    audit.set_defaults(run=run_audit)

    from llmgw.cli import usage  # here: it imports client() from this module
    usage.register(sub, common)
    from llmgw.cli import requests

    requests.register(sub, common)
    from llmgw.cli import guard as guard_cli

    guard_cli.register(sub, common)
    from llmgw.cli import models

    models.register(sub, common)
    from llmgw.cli import logs

    logs.register(sub, common)
    from llmgw.cli import fabric

    fabric.register(sub, common)
    from llmgw.cli import tree

    tree.register(sub, common)
    from llmgw.cli import auth

    auth.register(sub, common)
    from llmgw.cli import webhooks

    webhooks.register(sub, common)
    from llmgw.cli import kbadmin

    kbadmin.register(sub, common)
    from llmgw.cli import mcp

    mcp.register(sub, common)


def run_status(args) -> int:
    status = client(args).call("GET", "/api/v1/status")
    if args.json:
        emit_json(status)
        return 0
    leader = status["leader"]
    store = status["store"]
    fields([
        ("control plane", f"{status['name']} ({status['role']})"),
        ("version", status["version"]),
        ("leader", f"{leader['holder']} at {leader['address']} (epoch {leader['epoch']})" if leader else "none"),
        ("store", f"{store['address']} ({'up' if store['up'] else 'NOT ANSWERING'}, schema {store['schema']})"),
        ("settings", f"version {status['settings_version']}"),
        ("listening", ", ".join(f"{k} {v}" for k, v in status["listen"].items())),
        ("agents", _agents_line(status.get("agents"))),
        ("up for", f"{status['uptime_s']:.0f} s"),
        *_plugin_fields(status.get("plugins", [])),
    ])
    cluster = status.get("machines") or {}
    rows = [(cp["name"], f"control plane ({cp['role']})", cp["version"], cp["address"])
            for cp in cluster.get("control_planes", [])]
    rows += [(n["name"], "node", n["version"], n["state"]) for n in cluster.get("nodes", [])]
    if rows:
        print()
        table(["machine", "is", "version", "where / state"], rows)
    return 0


def _plugin_fields(plugins: list[dict]) -> list[tuple[str, str]]:
    """A line per plugin of the site's (llmgw's own built-ins are in --json)."""
    from llmgw.plugins import BUILTIN_DISTRIBUTION, describe

    theirs = [p for p in plugins if p["distribution"] != BUILTIN_DISTRIBUTION]
    if not theirs:
        return [("plugins", "none besides llmgw's own")]
    return [("plugin", describe(p)) for p in theirs]


def _agents_line(agents: dict | None) -> str:
    if not agents:
        return "-"
    if agents["taking"]:
        return f"taken at {agents['address']} over mutual TLS (cluster CA sha256 {agents['ca_fingerprint'][:16]}…)"
    return f"REFUSED: {agents['problem']}"


def run_config_get(args) -> int:
    answer = client(args).call("GET", "/api/v1/config", query={"path": args.path})
    if args.json:
        emit_json(answer)
        return 0
    value = answer["value"]
    if isinstance(value, (dict, list)):
        import yaml

        print(yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip())
    else:
        print(value)
    return 0


def _done(args, answer) -> int:
    if args.json:
        emit_json(answer)
    else:
        print(f"cluster settings version {answer['version']}; in force on every control plane within 5 s")
    return 0


def run_config_set(args) -> int:
    if len(args.pairs) % 2:
        raise AdminError("config set takes pairs: PATH VALUE [PATH VALUE …]")
    pairs = dict(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    return _done(args, client(args).call("POST", "/api/v1/config", {"set": pairs}))


def run_config_unset(args) -> int:
    return _done(args, client(args).call("POST", "/api/v1/config", {"unset": args.paths}))


def run_config_edit(args) -> int:
    import subprocess
    import tempfile

    import yaml

    api = client(args)
    current = api.call("GET", "/api/v1/config")
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w+", suffix=".yaml", prefix="llmgw-settings-", delete=False) as f:
        f.write(f"# The cluster's settings, version {current['version']}. Save and quit to apply;\n"
                "# leave unchanged to do nothing. Keys: docs/reference.md.\n")
        yaml.safe_dump(current["value"], f, sort_keys=False)
        path = f.name
    try:
        while True:
            if subprocess.call([*editor.split(), path]) != 0:
                raise AdminError(f"{editor} exited with an error; nothing was changed")
            with open(path) as f:
                try:
                    doc = yaml.safe_load(f) or {}
                except yaml.YAMLError as e:
                    raise AdminError(f"the edited document is not YAML ({e}); nothing was changed") from None
            if doc == current["value"]:
                print("no change")
                return 0
            try:
                answer = api.call("POST", "/api/v1/config",
                                  {"settings": doc, "expected_version": current["version"]})
            except AdminError as e:
                if e.status == 400 and os.isatty(0):
                    input(f"llmgw: {e}\npress Enter to edit again, Ctrl-C to give up ")
                    continue
                raise
            return _done(args, answer)
    finally:
        os.unlink(path)


def run_audit(args) -> int:
    from llmgw.config import Duration

    since = None
    if args.since:
        try:
            since = time.time() - float(Duration.parse(args.since))
        except ValueError as e:
            raise AdminError(f"--since: {e}") from None
    entries = client(args).call("GET", "/api/v1/audit",
                                query={"limit": args.limit, "since": since, "target": args.target})
    if args.json:
        emit_json(entries)
        return 0
    table(["when", "who", "via", "action", "target", "change"], [
        (when(e["at"]), e["actor"], e["via"], e["action"], e["target"], _change(e["before"], e["after"], e["action"]))
        for e in entries
    ])
    return 0


# A row of the table stays one readable line: `model.remove` listed every key of
# the removed model's file (before: its spec, after: {"purge": …}), one very
# long line. --json keeps the whole record.
SHOWN_CHANGES = 4


def _change(before, after, action: str = "") -> str:
    if action in ("person.join", "person.leave"):  # {"place": …} on one side only: not a creation or removal
        return f"{'joined' if action == 'person.join' else 'left'} {(after or before or {}).get('place')}"
    if action.endswith((".remove", ".delete")) or (before is not None and after is None):
        options = after if isinstance(after, dict) else {}
        return "removed" + (" (" + ", ".join(f"{k}: {_short(v)}" for k, v in sorted(options.items())) + ")"
                            if options else "")
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(set(before) | set(after))
        parts = [f"{k}: {_short(before.get(k))} → {_short(after.get(k))}" for k in keys
                 if before.get(k) != after.get(k)]
        if len(parts) > SHOWN_CHANGES:
            parts = parts[:SHOWN_CHANGES] + [f"and {len(parts) - SHOWN_CHANGES} more (--json shows them)"]
        return "; ".join(parts)
    if before is None:
        return "created"
    return f"{_short(before)} → {_short(after)}"


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "…"

