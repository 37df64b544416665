"""`llmgw mirror`: the model mirror's process, and the commands that change what it keeps (docs/mirror.md).

The commands other than `serve` and `add-peer` talk to the mirror running on this machine, over its TLS port, with
the certificate it serves with (so they run as root, or as the user the mirror runs as). `add-peer` installs a
second mirror on another machine over SSH (onboard/mirroradd.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from llmgw import stopsignals

DEFAULT_CONFIG = "/etc/llmgw/mirror.yaml"


def register(commands) -> None:
    mirror = commands.add_parser(
        "mirror", help="the model mirror: one checked copy of every pinned model file, for the nodes",
        description="The mirror keeps one copy of every file the catalog pins, fetched once from Hugging Face and "
                    "checked against the sha256 it publishes, and serves it to the nodes over the cluster's mutual "
                    "TLS, with ranges. Set the cluster's mirror.url to it and the nodes fetch from it only "
                    "(docs/mirror.md).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH",
                        help=f"mirror.yaml (default {DEFAULT_CONFIG} where it exists, else every default)")
    common.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    sub = mirror.add_subparsers(dest="mirror_command", metavar="COMMAND", parser_class=type(mirror))
    sub.required = True

    serve = sub.add_parser("serve", parents=[common], help="run the mirror (systemd's llmgw-mirror.service runs this)",
                           description="Serve the files the mirror keeps, fetch what the control planes pin and it "
                                       "lacks, and keep in step with the peers mirror.yaml names.")
    serve.set_defaults(run=_serve)

    add = sub.add_parser("add", parents=[common], help="fetch a file (or a whole repository) into the mirror, checked",
                         description="Pin SOURCE to its commit now and fetch it, checked against the sha256 "
                                     "Hugging Face publishes (hf:ORG/REPO[/FILE][@REVISION]); for any other "
                                     "address give the sha256 it must have. Waits until it is here.")
    add.add_argument("source", metavar="SOURCE", help="hf:ORG/REPO[/FILE][@REVISION], or https://…")
    add.add_argument("--sha256", default="", help="the file's sha256, for an address that is not Hugging Face")
    add.set_defaults(run=_add)

    listing = sub.add_parser("list", parents=[common],
                             help="every file: its pin, size, checksum, scan, the models using it",
                             description="What the mirror holds, is fetching, or failed to fetch.")
    listing.set_defaults(run=_list)

    remove = sub.add_parser("remove", parents=[common], help="delete files from the mirror (a peer follows)",
                            description="Delete ORG/REPO/COMMIT/PATH, or every file under ORG/REPO[/COMMIT]. A "
                                        "file a catalog model loads is refused, naming the model.")
    remove.add_argument("what", metavar="KEY", help="ORG/REPO/COMMIT/PATH, or ORG/REPO[/COMMIT] for all under it")
    remove.set_defaults(run=_remove)

    imports = sub.add_parser("import", parents=[common], help="take files carried in on a disk (an air-gapped site)",
                             description="Copy in the files of DIR, a Hugging Face cache folder or a folder with "
                                         "a manifest.json, each checked against the catalog's pin for it or the "
                                         "checksum published with it. DIR is on the mirror's machine.")
    imports.add_argument("dir", metavar="DIR")
    imports.set_defaults(run=_import)

    from llmgw.cli.main import admin_options
    from llmgw.cli.sshinstall import copy_options, login_options

    peer = sub.add_parser(
        "add-peer", parents=[admin_options()],
        help="install a second mirror on another machine over SSH, kept in step with this one",
        description="Run as root where a mirror and a control plane run. Log in to USER@HOST, copy this program "
                    "there, make the mirror's key there (it never leaves that machine) and have the cluster CA sign "
                    "its certificate, write mirror.yaml naming this mirror as its peer, and install and start "
                    "llmgw-mirror.service there. Then wait for it to answer, and name it in this mirror's "
                    "mirror.yaml and in the cluster's mirror.peers. Each step can run again and says \"unchanged\" "
                    "when there was nothing to do (docs/mirror.md).")
    peer.add_argument("ssh", metavar="USER@HOST[:PORT]", help="the machine to install the mirror on")
    peer.add_argument("--config", metavar="PATH", help=f"this mirror's mirror.yaml (default {DEFAULT_CONFIG})")
    peer.add_argument("--name", help="the mirror's name in its certificate (default: the host)")
    peer.add_argument("--listen", default=":8600", metavar="ADDR",
                      help="where the new mirror listens, on its machine (default :8600)")
    peer.add_argument("--dir", default="/var/cache/llmgw/mirror", metavar="DIR",
                      help="where the new mirror keeps its files: the largest disk there "
                           "(default /var/cache/llmgw/mirror)")
    peer.add_argument("--url", metavar="URL",
                      help="this mirror's address as the new one reaches it (default: from mirror.yaml's listen "
                           "and this machine's address on its default route)")
    login_options(peer)
    peer.add_argument("--port", type=int, metavar="N", help="the SSH port (default 22, or the one in USER@HOST)")
    peer.add_argument("--root", metavar="DIR",
                      help="install under DIR on that machine instead of / (for tests); implies --services "
                           "supervised")
    peer.add_argument("--services", choices=("systemd", "supervised"),
                      help="who keeps the mirror running there (default: systemd where it runs the machine)")
    copy_options(peer, "the mirror")
    peer.set_defaults(run=_add_peer)


def _config(args):
    from llmgw.config import ConfigError, load_mirror_config

    path = args.config or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
    try:
        return load_mirror_config(path)
    except ConfigError as e:
        # 2, as for any usage error: the unit does not restart on it (RestartPreventExitStatus).
        print(f"llmgw: {e}", file=sys.stderr)
        raise SystemExit(2) from None


@stopsignals.taken_by_the_program
def _serve(args) -> int:
    import asyncio

    from llmgw import logsetup
    from llmgw.errors import ExpectedError
    from llmgw.mirror import serve

    cfg = _config(args)
    path = args.config or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
    logsetup.setup("info", "text")
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # not built for this platform; asyncio's own loop does the same work
        pass
    try:
        asyncio.run(serve(cfg, path))
    except ExpectedError as e:
        print(f"llmgw: mirror: {e}", file=sys.stderr)
        return 1
    return 0


def _call(args, what):
    """Run `what(client)` against this machine's mirror; its answer, or exit 1 with the mirror's sentence."""
    import asyncio

    from llmgw.errors import ExpectedError
    from llmgw.mirror import MirrorClient, MirrorError, client_context

    cfg = _config(args)
    port = cfg.listen.port
    host = cfg.listen.host if cfg.listen.host not in ("", "0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
    try:
        client = MirrorClient(f"https://{host}:{port}", client_context(cfg))
        return asyncio.run(what(client))
    except (MirrorError, ExpectedError) as e:
        print(f"llmgw: mirror: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def _size(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _list(args) -> int:
    from llmgw.cli.output import emit_json, table

    listing = _call(args, lambda c: c.files())
    if args.json:
        emit_json(listing)
        return 0
    rows = []
    for f in listing["files"]:
        state = f["state"]
        progress = f.get("progress") or {}
        if state == "fetching" and progress.get("total"):
            state = f"fetching {100 * progress['done'] // progress['total']}%"
        elif state == "failed":
            state = f"failed: {progress.get('error', '')}"
        rows.append([f"{f['repo']}/{f['path']}", f["commit"][:12], _size(f["size"]), (f["sha256"] or "-")[:12],
                     f["scan"] or "-", ", ".join(f["models"]) or "-", state])
    table(["file", "commit", "size", "sha256", "scan", "models", "state"], rows)
    count = len(listing["files"])
    print(f"{count} file{'' if count == 1 else 's'}, {_size(listing['used_bytes'])} held")
    return 0


def _add(args) -> int:
    from llmgw.cli.output import emit_json

    print(f"fetching {args.source} into the mirror; `llmgw mirror list` shows how far it has got", file=sys.stderr)
    answer = _call(args, lambda c: c.add(args.source, args.sha256, timeout=None))
    if args.json:
        emit_json(answer)
    else:
        for key in answer["added"]:
            print(f"kept {key}, checked")
    return 0


def _remove(args) -> int:
    from llmgw.cli.output import emit_json

    answer = _call(args, lambda c: c.remove(args.what))
    if args.json:
        emit_json(answer)
    else:
        for key in answer["removed"]:
            print(f"removed {key}")
    return 0


def _import(args) -> int:
    from llmgw.cli.output import emit_json

    folder = os.path.abspath(args.dir)
    answer = _call(args, lambda c: c.import_dir(folder, timeout=None))
    if args.json:
        emit_json(answer)
        return 0 if not answer["refused"] else 1
    for key in answer["imported"]:
        print(f"imported {key}, checked")
    for key in answer["already"]:
        print(f"already held {key}")
    for row in answer["refused"]:
        print(f"refused {row['file']}: {row['why']}")
    print(f"{len(answer['imported'])} imported, {len(answer['already'])} already held, "
          f"{len(answer['refused'])} refused")
    return 0 if not answer["refused"] else 1


def _add_peer(args) -> int:
    import asyncio
    from pathlib import Path

    from llmgw.cli.ctl import client
    from llmgw.cli.output import emit_json
    from llmgw.cli.sshinstall import _reporter, _systemd_in_a_directory, credentials
    from llmgw.onboard import MirrorAdd, Progress, Target, add_peer, program_file

    if _systemd_in_a_directory(args):
        return 2
    admin = client(args)
    target = Target.parse(args.ssh, args.port)
    known_hosts = Path(args.known_hosts) if args.known_hosts else Path(admin.token_path).parent / "known_hosts"
    job = MirrorAdd(target=target, credentials=credentials(args, str(target)), known_hosts=known_hosts,
                    program=program_file(args.program), root=args.root or "/",
                    services=args.services or ("supervised" if args.root else None), name=args.name,
                    wait=args.wait, listen=args.listen, folder=args.dir, config=args.config or DEFAULT_CONFIG,
                    url=args.url or "")
    steps: list[Progress] = []
    report = _reporter(args, steps)
    peer = asyncio.run(add_peer(job, admin, report))
    if args.json:
        emit_json({"mirror": peer, "steps": [p.__dict__ for p in steps]})
        return 0
    print(f"\n{peer['url']} is a mirror kept in step with {peer['peer_of']}, and in the cluster's mirror.peers.")
    return 0
