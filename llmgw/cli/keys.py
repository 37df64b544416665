"""`llmgw keys`: API keys and the limits on every level of the tree."""

from __future__ import annotations

import argparse
import textwrap

from llmgw.cli.ctl import client
from llmgw.cli.output import ago, emit_json, fields, table
from llmgw.control import AdminError

_CACHE_DESCRIPTION = (
    "Reuse a project's answers: a request the same as one already answered within --ttl gets that "
    "answer again from the gateway's memory (x-llmgw-cache: hit), streamed or not, at no cost and "
    "without asking the model. Off for every project until this is run. --similar also answers a chat "
    "question like one already answered in the same conversation (the same system prompt, earlier "
    "turns, tools, sampling settings and model): its last user message embedded by "
    "router.cache.embedding_model, and given the answer whose question reaches that cosine similarity "
    "(x-llmgw-cache: similar). Never for a request under a no_store policy or one whose redacted values "
    "are put back (restore). Without --ttl or --off, says how it stands. docs/cache.md has the rest."
)


def register(commands, common) -> None:
    keys = commands.add_parser("keys", help="API keys and limits",
                               description="Make, list and revoke API keys; set limits on orgs, teams, "
                                           "projects and keys.")
    sub = keys.add_subparsers(dest="keys_command", metavar="COMMAND")

    create = sub.add_parser("create", parents=[common], help="make a key (printed once)")
    create.add_argument("name")
    create.add_argument("--project", required=True, metavar="ORG/TEAM/PROJECT",
                        help="where the key belongs: a project that exists (llmgw ctl tree lists them)")
    create.add_argument("--create", action="store_true",
                        help="make the org, team and project on the way if they do not exist; they start "
                             "with no limits of their own")
    create.add_argument("--ttl", metavar="DURATION", help="how long it lasts, e.g. 30d (auth.max_key_ttl caps it)")
    create.add_argument("--band", help="its admission priority band")
    create.add_argument("--person", metavar="EMAIL", help="the person it belongs to")
    create.set_defaults(run=run_create)

    listing = sub.add_parser("list", parents=[common], help="every key, or a project's")
    listing.add_argument("--project", metavar="ORG/TEAM/PROJECT")
    listing.set_defaults(run=run_list)

    show = sub.add_parser("show", parents=[common], help="one key and its own limits")
    show.add_argument("id")
    show.set_defaults(run=run_show)

    revoke = sub.add_parser("revoke", parents=[common], help="refuse a key from now on")
    revoke.add_argument("id")
    revoke.set_defaults(run=run_revoke)

    limits = sub.add_parser("limits", parents=[common], help="show or change limits at one level",
                            description="Without a limit flag, shows the level's limits and those above "
                                        "it. Flags change only what they name; --replace writes exactly "
                                        "what is given and clears the rest. 'none' clears one limit.")
    limits.add_argument("--scope", required=True, choices=["org", "team", "project", "key"])
    limits.add_argument("--id", required=True, help="an id, or ORG, ORG/TEAM, ORG/TEAM/PROJECT")
    limits.add_argument("--rpm", help="requests a minute")
    limits.add_argument("--tpm", help="tokens a minute")
    limits.add_argument("--budget", help="money per --period, e.g. 25.00")
    limits.add_argument("--period", choices=["day", "month"], help="the budget's period (default month)")
    limits.add_argument("--models", help="comma-separated models allowed; 'none' (or '*') clears the limit, so every "
                                         "model the levels above allow is allowed")
    limits.add_argument("--tools", metavar="PATTERNS",
                        help="comma-separated MCP tools granted, as server.tool patterns ('jira.*,db.query'); "
                             "'' closes the level to every tool, 'none' stops it naming any (docs/mcp.md)")
    limits.add_argument("--expires", metavar="DURATION", help="refuse from this long from now, e.g. 90d")
    limits.add_argument("--replace", action="store_true", help="write exactly these limits, clearing the rest")
    limits.set_defaults(run=run_limits)

    cache = sub.add_parser(
        "cache", parents=[common], help="show or change a project's answer cache",
        description=textwrap.fill(_CACHE_DESCRIPTION, 79),
        epilog="examples:\n  llmgw keys cache --project Acme/ml/train --ttl 1h\n"
               "  llmgw keys cache --project Acme/support/desk --ttl 24h --similar 0.8\n"
               "  llmgw keys cache --project Acme/ml/train --off",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cache.add_argument("--project", required=True, metavar="ORG/TEAM/PROJECT", help="the project, or its id")
    cache.add_argument("--ttl", metavar="DURATION", help="reuse answers for this long, e.g. 24h")
    cache.add_argument("--similar", type=_similarity, metavar="T",
                       help="also answer chat questions reaching this cosine similarity to one answered in the "
                            "same conversation, above 0 up to 1 (0.95 is strict for a large embedder; "
                            "all-MiniLM-L6-v2 scores rewordings lower, see docs/cache.md)")
    cache.add_argument("--off", action="store_true", help="stop reusing this project's answers")
    cache.set_defaults(run=run_cache)


def run_create(args) -> int:
    key = client(args).call("POST", "/api/v1/keys", {
        "name": args.name, "project": args.project, "ttl": args.ttl, "band": args.band, "person": args.person,
        "create": args.create,
    })
    if args.json:
        emit_json(key)
        return 0
    print(key["key"])
    print(f"\n{key['name']} ({key['id']}) in {key['project']}"
          + (f", expires {ago(key['expires_at'])}" if key["expires_at"] else "")
          + ". The key is shown once and kept nowhere: copy it now.")
    return 0


def run_list(args) -> int:
    keys = client(args).call("GET", "/api/v1/keys", query={"project": args.project})
    if args.json:
        emit_json(keys)
        return 0
    table(["id", "name", "prefix", "project", "state", "created", "expires"], [
        (k["id"], k["name"], k["prefix"] + "…", k["project"], k["state"], ago(k["created_at"]),
         ago(k["expires_at"])) for k in keys
    ])
    return 0


def run_show(args) -> int:
    key = client(args).call("GET", f"/api/v1/keys/{args.id}")
    if args.json:
        emit_json(key)
        return 0
    limits = key.get("limits") or {}
    fields([
        ("id", key["id"]), ("name", key["name"]), ("prefix", key["prefix"] + "…"),
        ("project", key["project"]), ("state", key["state"]), ("band", key["band"]),
        ("created", ago(key["created_at"])), ("expires", ago(key["expires_at"])),
        ("revoked", ago(key["revoked_at"])),
        ("limits", _limits_text(limits) or "none of its own"),
    ])
    return 0


def run_revoke(args) -> int:
    key = client(args).call("POST", f"/api/v1/keys/{args.id}/revoke")
    if args.json:
        emit_json(key)
    else:
        print(f"{key['id']} ({key['name']}) is revoked; this control plane refuses it now, "
              "every other within auth.cache_ttl")
    return 0


def _number(flag: str, text: str | None):
    if text is None or text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise AdminError(f"--{flag} takes a whole number or none, not {text!r}") from None
    if value < 0:
        raise AdminError(f"--{flag} cannot be negative")
    return value


def run_limits(args) -> int:
    api = client(args)
    given: dict = {}
    if args.rpm is not None:
        given["rpm"] = _number("rpm", args.rpm)
    if args.tpm is not None:
        given["tpm"] = _number("tpm", args.tpm)
    if args.budget is not None:
        given["budget"] = None if args.budget.lower() == "none" else args.budget
    if args.period is not None:
        given["period"] = args.period
    if args.models is not None:
        # 'none' clears the limit as it does every other flag's (the description says so); it once stored a
        # model literally named "none", which no request could match, closing the level to every model.
        given["models"] = None if args.models.strip().lower() in ("*", "none") else [
            m.strip() for m in args.models.split(",") if m.strip()]
    if args.tools is not None:
        given["tools"] = None if args.tools.strip().lower() == "none" else [
            t.strip() for t in args.tools.split(",") if t.strip()]
    if args.expires is not None:
        given["expires"] = None if args.expires.lower() == "none" else args.expires
    if not given and not args.replace:
        answer = api.call("GET", "/api/v1/limits", query={"scope": args.scope, "id": args.id})
        if args.json:
            emit_json(answer)
            return 0
        print(f"{args.scope} {answer['id']}: {_limits_text(answer['limits']) or 'no limits of its own'}")
        for above in answer["above"]:
            print(f"  under {above['scope']} {above['scope_id']}: {_limits_text(above) or 'no limits'}")
        return 0
    answer = api.call("PUT", "/api/v1/limits", {"scope": args.scope, "id": args.id, "limits": given,
                                                "replace": args.replace})
    if args.json:
        emit_json(answer)
    else:
        print(f"{args.scope} {answer['id']}: {_limits_text(answer['limits']) or 'no limits of its own'}")
    return 0


def _similarity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a cosine similarity like 0.95, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a cosine similarity above 0 and up to 1, got {text}")
    return value


def run_cache(args) -> int:
    api = client(args)
    if args.off and (args.ttl is not None or args.similar is not None):
        raise AdminError("--off, or --ttl with --similar: not both")
    if args.similar is not None and args.ttl is None:
        raise AdminError("--similar goes with --ttl: say how long answers are reused, like --ttl 24h")
    if args.off or args.ttl is not None:
        payload: dict = {"project": args.project, "off": True} if args.off else {
            "project": args.project, "ttl": args.ttl, "similar": args.similar}
        answer = api.call("PUT", "/api/v1/cache", payload)
    else:
        answer = api.call("GET", "/api/v1/cache", query={"project": args.project})
    if args.json:
        emit_json(answer)
        return 0
    print(_cache_text(answer["project"], answer["cache"]))
    return 0


def _cache_text(project: str, cache: dict) -> str:
    if not cache["enabled"]:
        return f"{project} does not reuse answers; every request is asked of the model."
    text = f"{project} reuses an answer for {cache['ttl_text']} when the very same request is asked again."
    if cache.get("similar") is not None:
        text += (f"\nChat questions reaching {cache['similar']:g} similarity to one answered in the same "
                 "conversation get its answer too.")
    return text


def _limits_text(limits: dict) -> str:
    from llmgw.account.limits import describe  # llmgw.account is the store's too: not for every --help

    parts = describe(limits)
    if limits.get("expires_at") is not None:
        parts.append(f"expires {ago(limits['expires_at'])}")
    return "; ".join(parts)
