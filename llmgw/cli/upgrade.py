"""`llmgw upgrade`: move the cluster to another llmgw, machine by machine, over this control plane's admin API.

    llmgw upgrade ./llmgw.pyz [--wave-size N]     check it, hold it, upgrade every machine to it
    llmgw upgrade 0.2.0                          a version this control plane holds already
    llmgw upgrade --from-bundle llmgw-0.2.0-bundle.tar
    llmgw upgrade --resume | --rollback | --status

And, hidden, `llmgw upgrade-watchdog`: what a machine that upgraded itself
leaves running from its previous program (llmgw.release.watchdog).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from llmgw.cli.output import emit_json
from llmgw.control import AdminClient, AdminError

# llmgw.release (aiohttp, for the releases a control plane serves) is imported
# by the commands that use it, not by every `llmgw --help` (issue 26).
if TYPE_CHECKING:
    from pathlib import Path

FOLLOW_EVERY = 1.0
UNREACHABLE_FOR = 180.0  # this very control plane restarts into the new version: its admin API is away a while


def register(commands, common) -> None:
    p = commands.add_parser(
        "upgrade", parents=[common], help="upgrade every machine of the cluster, control planes first, nodes in waves",
        description="Upgrade the cluster to another llmgw: the control planes one at a time (standbys first, the "
                    "leader last), then the nodes in waves, each checked healthy on the new version before the "
                    "next. Run on a control plane. docs/upgrade.md.")
    p.add_argument("program", nargs="?", metavar="FILE|VERSION",
                   help="an llmgw.pyz (or an offline bundle), or a version this control plane holds")
    p.add_argument("--from-bundle", metavar="FILE", help="the offline bundle (`python3 build.py dist --bundle`)")
    p.add_argument("--wave-size", type=int, default=1, metavar="N", help="nodes upgraded at once (default 1)")
    p.add_argument("--within", type=float, default=0, metavar="SECONDS",
                   help="how long each machine has to come back healthy on the new version (default 120)")
    p.add_argument("--resume", action="store_true", help="carry on a stopped upgrade from where it stopped")
    p.add_argument("--rollback", action="store_true",
                   help="put every machine the last upgrade touched back on the version it ran before")
    p.add_argument("--status", action="store_true", help="say how far the last upgrade got, and stop")
    p.add_argument("--no-wait", action="store_true", help="start it and return; --status follows it later")
    p.set_defaults(run=run)

    # Run by llmgw itself, not by people: no help= at all, which is what leaves a command out of `llmgw --help`.
    # help=argparse.SUPPRESS does not, for a subcommand: argparse printed its name and "==SUPPRESS==" there.
    w = commands.add_parser("upgrade-watchdog")
    w.hidden = True  # docs cli leaves it out, as `llmgw onboard`
    w.add_argument("--program", required=True)
    w.add_argument("--version", required=True)
    w.add_argument("--data-dir", required=True)
    w.add_argument("--within", type=float, required=True)
    w.add_argument("--since", type=float, required=True)
    w.add_argument("--unit", default="")
    w.add_argument("--root", default="")
    w.set_defaults(run=run_watchdog)

    a = commands.add_parser("upgrade-apply",
                            description="Run as root by llmgw-upgrade.service: put the program a control plane "
                                        "staged in place of this machine's and restart the control plane "
                                        "(llmgw.release.helper).")
    a.add_argument("--data-dir", default="", help="the control plane's data directory (default /var/lib/llmgw)")
    a.add_argument("--root", default="/", help="the install's root (a test's directory)")
    a.hidden = True
    a.set_defaults(run=run_apply)


def run(args) -> int:
    chosen = [flag for flag, on in (("FILE|VERSION", bool(args.program or args.from_bundle)),
                                    ("--resume", args.resume), ("--rollback", args.rollback),
                                    ("--status", args.status)) if on]
    if len(chosen) != 1:
        raise AdminError("give one of: FILE|VERSION (or --from-bundle FILE), --resume, --rollback, --status"
                         + (f"; got {', '.join(chosen)}" if chosen else ""))
    api = AdminClient(args.admin, args.token_file)
    if args.status:
        answer = api.call("GET", "/api/v1/upgrade")
        if args.json:
            emit_json(answer)
        else:
            _show(answer.get("upgrade"), answer.get("releases") or [])
        return 0
    if args.resume:
        started = api.call("POST", "/api/v1/upgrade/resume", {})
    elif args.rollback:
        started = api.call("POST", "/api/v1/upgrade/rollback", {})
    else:
        version = _held_version(api, args.from_bundle or args.program, bundle=bool(args.from_bundle))
        started = api.call("POST", "/api/v1/upgrade", {"version": version, "wave_size": args.wave_size,
                                                       "up_within": args.within or None})
    if args.no_wait:
        if args.json:
            emit_json(started)
        else:
            print("started; `llmgw upgrade --status` follows it")
        return 0
    return _follow(api, started["revision"], args.json)


def _held_version(api: AdminClient, given: str, bundle: bool) -> str:
    """The version to upgrade to: a file (program or bundle) is checked here, sent and held; else a version."""
    import tarfile
    import tempfile
    from pathlib import Path

    from llmgw.release import open_bundle, sha256_of

    path = Path(given)
    if not path.exists() and not bundle and "/" not in given and not given.endswith((".pyz", ".tar")):
        return given
    if bundle or tarfile.is_tarfile(path):
        with tempfile.TemporaryDirectory(prefix="llmgw-bundle-") as folder:
            opened = open_bundle(path, folder)
            print(f"bundle {path.name}: llmgw {opened.version}, "
                  f"{len(opened.wheels)} wheel(s), every file matching its sha256", file=sys.stderr)
            for wheel in opened.wheels:
                _upload(api, f"/api/v1/wheels/{wheel.name}", wheel, {"X-Llmgw-Sha256": sha256_of(wheel)})
            return _send(api, opened.program)
    return _send(api, path)


def _send(api: AdminClient, path: Path) -> str:
    from llmgw.release import check_program

    program = check_program(path)  # here first: a bad file is refused before it travels
    print(f"{path.name}: llmgw {program.version}, sha256 {program.sha256[:16]}…, built for "
          f"{program.built_for.get('system')} {program.built_for.get('machine')}; starts", file=sys.stderr)
    _upload(api, "/api/v1/releases", path, {})
    return program.version


def _upload(api: AdminClient, route: str, path: Path, headers: dict[str, str]) -> None:
    """POST a file's bytes as they are (a program is tens of MB: not JSON)."""
    import urllib.error
    import urllib.request

    with open(path, "rb") as f:
        request = urllib.request.Request(  # noqa: S310 - _base() is http(s)
            api._base() + route, data=f, method="POST",
            headers={"Authorization": f"Bearer {api.token()}", "Content-Type": "application/octet-stream",
                     "Content-Length": str(path.stat().st_size), "X-Llmgw-Via": "cli", **headers})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - _base() is http(s)
                response.read()
        except urllib.error.HTTPError as e:
            raise AdminError(_message(e.read()) or f"the admin API answered {e.code}", e.code) from None
        except urllib.error.URLError as e:
            raise AdminError(f"cannot reach the llmgw server at {api.address}: {e.reason}") from None


def _message(raw: bytes) -> str:
    import json

    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""


def _follow(api: AdminClient, revision: int, as_json: bool) -> int:
    """Print each machine's progress until the upgrade is done or stopped; 0 done, 1 stopped."""
    said: dict[str, str] = {}
    away_since: float | None = None
    doc: dict[str, Any] | None = None
    while True:
        try:
            answer = api.call("GET", "/api/v1/upgrade")
            away_since = None
        except AdminError as e:
            if e.status is not None:
                raise
            # This control plane is restarting into the new version (the leader upgrades itself last).
            away_since = away_since or time.monotonic()
            if time.monotonic() - away_since > UNREACHABLE_FOR:
                raise AdminError(f"this control plane's admin API has not answered for {UNREACHABLE_FOR:g} s "
                                 "since it restarted for the upgrade; `llmgw upgrade --status` on another "
                                 "control plane says how far it got") from None
            if "here" not in said:
                said["here"] = "away"
                print("this control plane is restarting into the new version; waiting for it", file=sys.stderr)
            time.sleep(FOLLOW_EVERY)
            continue
        doc = answer.get("upgrade")
        if doc is None:
            raise AdminError("the upgrade's record is gone; `llmgw upgrade --status` says what there is")
        if not as_json:
            for m in doc["machines"]:
                line = _line(m)
                if said.get(m["kind"] + m["id"]) != line:
                    said[m["kind"] + m["id"]] = line
                    print(line, flush=True)
        if doc["state"] in ("done", "stopped"):
            break
        time.sleep(FOLLOW_EVERY)
    if as_json:
        emit_json(doc)
    else:
        print(("done: " if doc["state"] == "done" else "STOPPED: ") + doc["sentence"])
    return 0 if doc["state"] == "done" else 1


def _line(m: dict[str, Any]) -> str:
    what = f"control plane {m['name']} ({m['role']})" if m["kind"] == "control_plane" else f"node {m['name']}"
    wave = f"wave {m['wave'] + 1}: "
    state = {"pending": "waits", "doing": "upgrading", "done": "done", "unchanged": "already on it",
             "failed": "FAILED"}.get(m["state"], m["state"])
    return f"{wave}{what} {m['from']} → {m['to']}: {state}" + (f" — {m['sentence']}" if m["sentence"] else "")


def _show(doc: dict[str, Any] | None, releases: list[str]) -> None:
    held = f"programs held here: {', '.join(releases) or 'none'}"
    if doc is None:
        print(f"no upgrade yet; {held}")
        return
    kind = "rollback" if doc["rollback"] else f"upgrade to {doc['to']}"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["started_at"]))
    print(f"{kind}: {doc['state']}, started by {doc['by']} at {started}")
    for m in doc["machines"]:
        print(_line(m))
    if doc["sentence"]:
        print(doc["sentence"])
    print(held)


def run_apply(args) -> int:
    from pathlib import Path

    from llmgw.onboard import Layout, service_manager
    from llmgw.release import ReleaseError, apply

    layout = Layout(Path(args.root))
    data_dir = layout.at(args.data_dir) if args.data_dir else layout.server_data
    extra = [] if layout.real else ["--root", str(layout.root)]
    try:
        said = apply(data_dir / "releases", layout.program, str(data_dir), service_manager(layout).restart, extra)
    except ReleaseError as e:
        print(f"llmgw: {e}", file=sys.stderr)
        return 1
    print(said)
    return 0


def run_watchdog(args) -> int:
    """The previous program's watch over the new one (llmgw.release.watchdog.watch)."""
    from pathlib import Path

    from llmgw.release import watch

    restart = None
    unit = args.unit or _systemd_unit()
    if unit:
        def restart() -> None:
            from llmgw.onboard import Layout, service_manager

            service_manager(Layout(Path(args.root or "/"))).restart(unit)

    def say(line: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} llmgw upgrade-watchdog (pid {os.getpid()}): {line}", flush=True)

    confirmed = watch(Path(args.program), args.version, args.data_dir, args.within, args.since, restart, say)
    return 0 if confirmed else 1


def _systemd_unit() -> str:
    """The systemd unit this process was started in, from its cgroup ("" when none)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                last = line.strip().rsplit("/", 1)[-1]
                if last.startswith("llmgw") and last.endswith(".service"):
                    return last
    except OSError:
        pass
    return ""



