"""`llmgw ctl auth`: how people sign in (OIDC, LDAP/AD, SCIM), tried before it is kept (docs/sign-in.md)."""

from __future__ import annotations

import sys
from typing import Any

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, fields, when
from llmgw.control import AdminError

TRIED = ("oidc", "ldap")


def register(sub, common) -> None:
    from llmgw.cli.tree import _shared_without_defaults as shared

    auth = sub.add_parser("auth", parents=[common], help="sign-in from the directory: OIDC, LDAP/AD, SCIM",
                          description="Without an action, shows how people sign in: each way on or off, the "
                                      "secrets kept in the store, the directory's last sync.")
    auth.set_defaults(run=run_status)
    actions = auth.add_subparsers(dest="auth_command", metavar="ACTION")

    test = actions.add_parser("test", parents=[shared()], help="try OIDC or LDAP, as set or from a file",
                              description="Try a sign-in block before it is kept: for OIDC, discovery and the "
                                          "redirect people would be sent on; for LDAP, each server, the service "
                                          "account's bind, who may sign in and, with --login, one person and "
                                          "their groups. Without --file, the block in force is tried.")
    test.add_argument("kind", choices=TRIED)
    _block_flags(test)
    test.set_defaults(run=run_test)

    keep = actions.add_parser("keep", parents=[shared()], help="try a block from a file and keep it if it works",
                              description="Try the block in FILE as `test` does, and write it as auth.KIND only "
                                          "when every step passed. Nothing is kept after a failed step.")
    keep.add_argument("kind", choices=TRIED)
    _block_flags(keep, required=True)
    keep.set_defaults(run=run_keep)

    off = actions.add_parser("off", parents=[shared()], help="turn OIDC, LDAP or SCIM off",
                             description="Put auth.KIND back to its defaults. The accounts it made stay; "
                                         "without a password of their own they cannot sign in until it is on again.")
    off.add_argument("kind", choices=(*TRIED, "scim"))
    off.set_defaults(run=run_off)

    secret = actions.add_parser("secret", help="keep a secret sealed in the store (store:auth/NAME)")
    secrets = secret.add_subparsers(dest="secret_command", metavar="ACTION")
    put = secrets.add_parser("set", parents=[shared()], help="seal a secret read from stdin or a file",
                             description="Seal the client secret, bind password or SCIM token under the "
                                         "master key in the store, for the settings to name as store:auth/NAME. "
                                         "The value is read from --from-file, or typed (not echoed), or the "
                                         "first line of stdin; never from the command line, where the shell's "
                                         "history would keep it.")
    put.add_argument("name", help="e.g. oidc-client, ldap-bind")
    put.add_argument("--from-file", metavar="PATH", help="read the value from this file's first line")
    put.set_defaults(run=run_secret_set)
    remove = secrets.add_parser("remove", parents=[shared()], help="forget a sealed secret")
    remove.add_argument("name")
    remove.set_defaults(run=run_secret_remove)

    token = actions.add_parser("scim-token", parents=[shared()], help="make the SCIM bearer token, shown once",
                               description="Make a new bearer token for the identity provider's provisioning "
                                           "(the tenant URL is https://GATEWAY/scim/v2). It is shown once; the "
                                           "store keeps its digest, and the token made before stops working.")
    token.set_defaults(run=run_scim_token)

    sync = actions.add_parser("sync", parents=[shared()], help="read the directory now, as the leader's sync does")
    sync.set_defaults(run=run_sync)


def _block_flags(parser, required: bool = False) -> None:
    parser.add_argument("--file", required=required, metavar="FILE",
                        help="a YAML file with the block (the keys under auth.KIND, or a document with auth: KIND:)")
    parser.add_argument("--login", default="", help="LDAP: a person to find, with their groups (ada, CORP\\ada)")
    parser.add_argument("--redirect-url", default="", help="OIDC: the address the provider sends people back to")


def read_block(path: str, kind: str) -> dict[str, Any]:
    """The block in a file: the keys of auth.KIND, or a settings document holding auth: KIND: …"""
    import yaml

    from llmgw.config import parse_yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = parse_yaml(f.read())
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AdminError(f"{path} is not YAML: {getattr(e, 'problem', None) or e}") from None
    if isinstance(doc, dict) and isinstance(doc.get("auth"), dict) and isinstance(doc["auth"].get(kind), dict):
        doc = doc["auth"][kind]
    if not isinstance(doc, dict):
        raise AdminError(f"{path} holds no auth.{kind} block: write its keys (urls:, base_dn:, … for ldap; "
                         "issuer:, client_id:, … for oidc) as a mapping")
    return doc


def print_trial(trial: dict[str, Any]) -> None:
    for step in trial["steps"]:
        print(f"  {'ok  ' if step['ok'] else 'FAIL'}  {step['name']}: {step['detail']}")
    if trial["ok"]:
        print("every step passed")
    else:
        failed = next((s["name"] for s in trial["steps"] if not s["ok"]), "")
        print(f'the trial failed at "{failed}"; the steps after it were not tried' if failed
              else "the trial tried nothing")


def run_status(args) -> int:
    status = client(args).auth()
    if args.json:
        emit_json(status)
        return 0
    oidc, ldap, scim = status["oidc"], status["ldap"], status["scim"]
    sync = ldap.get("last_sync")
    fields([
        ("passwords", "on" if status["passwords"]["on"] else
         f"off (only {status['passwords']['break_glass']} keeps one)"),
        ("single sign-on", f"on: {oidc['issuer']} (client {oidc['client_id']})" if oidc["on"] else "off"),
        *([("sign-in address", "NONE: single sign-on does not start until portal.address (or "
                               "auth.oidc.redirect_url) is set")] if oidc["on"] and not oidc.get("redirect_url")
          else []),
        ("directory", f"on: {', '.join(ldap['urls'])} under {ldap['base_dn']}" if ldap["on"] else "off"),
        ("last sync", _sync_text(sync) if ldap["on"] else "-"),
        ("provisioning", f"on: /scim/v2, token {_token_text(scim)}" if scim["on"] else "off"),
        ("tied accounts", ", ".join(f"{k} {v}" for k, v in status["accounts"].items())),
        ("kept secrets", ", ".join(status["secrets"]) or "none"),
    ])
    return 0


def _sync_text(sync: dict[str, Any] | None) -> str:
    if not sync:
        return "not yet"
    if sync.get("refused"):
        return f"{when(sync['at'])}: REFUSED: {sync['refused']}"
    return (f"{when(sync['at'])}: {sync.get('checked', 0)} checked, {_named(sync, 'suspended')} suspended, "
            f"{_named(sync, 'reinstated')} reinstated, {_named(sync, 'changed')} changed")


def _named(report: dict[str, Any], what: str) -> str:
    """How many, and who when few: "2 (ada@corp.example, bob@corp.example)"."""
    who = report.get(what) or []
    return f"{len(who)} ({', '.join(who)})" if 0 < len(who) <= 5 else str(len(who))


def _token_text(scim: dict[str, Any]) -> str:
    if scim["token"] == "file":  # noqa: S105 - where the token comes from, not the token
        return "from auth.scim.token_file"
    if scim["token"] == "made":  # noqa: S105 - where the token comes from, not the token
        return f"made {when(scim['token_made_at'])}"
    return "none yet (llmgw ctl auth scim-token makes one)"


def run_test(args) -> int:
    block = read_block(args.file, args.kind) if args.file else None
    trial = client(args).auth_test(args.kind, block, login=args.login, redirect_url=args.redirect_url)
    if args.json:
        emit_json(trial)
    else:
        print_trial(trial)
    return 0 if trial["ok"] else 1


def run_keep(args) -> int:
    block = read_block(args.file, args.kind)
    try:
        answer = client(args).auth_keep(args.kind, block, login=args.login)
    except AdminError as e:
        if e.code != "trial_failed":
            raise
        answer = e.answer
    if args.json:
        emit_json(answer)
    else:
        print_trial(answer["trial"])
        print(f"kept: auth.{args.kind} is in force, settings version {answer['version']}" if answer["kept"]
              else f"nothing was kept: auth.{args.kind} is as it was")
    return 0 if answer["kept"] else 1


def run_off(args) -> int:
    answer = client(args).auth_off(args.kind)
    print(f"auth.{args.kind} is off (settings version {answer['version']}); the accounts it made stay")
    return 0


def _read_secret(args) -> str:
    if args.from_file:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                return f.readline().strip()
        except OSError as e:
            raise AdminError(f"cannot read {args.from_file}: {e.strerror or e}") from None
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"the value of {args.name} (not shown): ").strip()
    return sys.stdin.readline().strip()


def run_secret_set(args) -> int:
    value = _read_secret(args)
    if not value:
        raise AdminError("no value was given: type it, pipe it on stdin, or give --from-file")
    ref = client(args).auth_secret_put(args.name, value)
    print(f"kept, sealed in the store; name it in the settings as {ref}")
    return 0


def run_secret_remove(args) -> int:
    client(args).auth_secret_delete(args.name)
    print(f"store:auth/{args.name} is forgotten")
    return 0


def run_scim_token(args) -> int:
    token = client(args).scim_token()
    if args.json:
        emit_json({"token": token})
        return 0
    print(token)
    print("Give it to the identity provider as the secret token, with the tenant URL https://GATEWAY/scim/v2. "
          "It is not shown again; the token before it stops working.", file=sys.stderr)
    return 0


def run_sync(args) -> int:
    report = client(args).ldap_sync()
    if args.json:
        emit_json(report)
        return 0
    print(_sync_text(report))
    return 1 if report.get("refused") else 0
