"""`llmgw ctl kb`: every project's knowledge bases, for the administrator (docs/knowledge.md)."""

from __future__ import annotations

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, table, when


def register(sub, common) -> None:
    from llmgw.cli.tree import _shared_without_defaults as shared

    kb = sub.add_parser("kb", parents=[common], help="knowledge bases: list, show, create, grant, delete",
                        description="Without an action, lists every project's knowledge bases: their files, "
                                    "bytes and embedding model. People fill them with llmgw-kb or /v1/vector_stores "
                                    "(docs/knowledge.md).")
    kb.set_defaults(run=run_list)
    actions = kb.add_subparsers(dest="kb_command", metavar="ACTION")
    listing = actions.add_parser("list", parents=[shared()], help="every project's knowledge bases")
    listing.set_defaults(run=run_list)
    show = actions.add_parser("show", parents=[shared()], help="one, with its files")
    show.add_argument("id")
    show.set_defaults(run=run_show)
    create = actions.add_parser("create", parents=[shared()], help="make one for a project, a team or an org",
                                description="Make an empty knowledge base for a place, whose keys all then see it "
                                            "and may fill it (llmgw-kb sync --kb NAME, or /v1/vector_stores).")
    create.add_argument("name")
    owner = create.add_mutually_exclusive_group(required=True)
    owner.add_argument("--project", metavar="ORG/TEAM/PROJECT")
    owner.add_argument("--team", metavar="ORG/TEAM")
    owner.add_argument("--org", metavar="ORG")
    create.add_argument("--embedding-model", metavar="MODEL",
                        help="the model that embeds it (default: router.knowledge.embedding_model)")
    create.set_defaults(run=run_create)
    grant = actions.add_parser("grant", parents=[shared()], help="give it to another place or a key",
                               description="Give a knowledge base to the keys of another project, team or org, or "
                                           "to one key: to read (search it, answer from it) or, with --write, to "
                                           "add and remove its files too. Deleting it stays its owner's. Giving it "
                                           "again to the same place replaces the grant.")
    grant.add_argument("id")
    _place_options(grant)
    grant.add_argument("--write", action="store_true", help="let them add and remove files too")
    grant.set_defaults(run=run_grant)
    revoke = actions.add_parser("revoke", parents=[shared()], help="take a grant back")
    revoke.add_argument("id")
    _place_options(revoke)
    revoke.set_defaults(run=run_revoke)
    delete = actions.add_parser("delete", parents=[shared()], help="delete one, with its passages",
                                description="Delete a knowledge base: its passages and vectors go from every "
                                            "control plane within a second; the uploaded files stay in /v1/files.")
    delete.add_argument("id")
    delete.set_defaults(run=run_delete)


def _place_options(parser) -> None:
    place = parser.add_mutually_exclusive_group(required=True)
    place.add_argument("--project", metavar="ORG/TEAM/PROJECT")
    place.add_argument("--team", metavar="ORG/TEAM")
    place.add_argument("--org", metavar="ORG")
    place.add_argument("--key", metavar="KEY_ID")


def _place(args) -> tuple[str, str]:
    for scope in ("project", "team", "org", "key"):
        value = getattr(args, scope, None)
        if value:
            return scope, value
    raise AssertionError("argparse requires one")


def _owner(b: dict) -> str:
    return f"{b['owner']['scope']} {b['owner']['place']}"


def _files(f: dict) -> str:
    parts = [f"{f['completed']} ready"]
    parts += [f"{f[k]} {k.replace('_', ' ')}" for k in ("in_progress", "failed", "cancelled") if f[k]]
    return ", ".join(parts)


def run_list(args) -> int:
    bases = client(args).call("GET", "/api/v1/kb")["knowledge_bases"]
    if args.json:
        emit_json(bases)
        return 0
    if not bases:
        print("no knowledge bases; people make them with llmgw-kb sync, or `llmgw ctl kb create`")
        return 0
    table(["id", "name", "owner", "model", "files", "bytes", "made"],
          [(b["id"], b["name"], _owner(b), b["embedding_model"], _files(b["files"]), b["usage_bytes"],
            when(b["created_at"])) for b in bases])
    return 0


def run_show(args) -> int:
    found = client(args).call("GET", f"/api/v1/kb/{args.id}")
    if args.json:
        emit_json(found)
        return 0
    b = found["knowledge_base"]
    print(f"{b['id']}  {b['name']}  ({_owner(b)}, embedded by {b['embedding_model']})")
    print(f"files: {_files(b['files'])}; {b['usage_bytes']} bytes; made {when(b['created_at'])}")
    for g in found["grants"]:
        print(f"given to {g['scope']} {g['place']} to {g['access']}")
    if found["files"]:
        table(["file", "name", "status", "passages", "left out", "bytes", "added"],
              [(f["file_id"], f["name"], f["status"], f["passages"], f["skipped_passages"], f["bytes"],
                when(f["created_at"])) for f in found["files"]])
    return 0


def run_create(args) -> int:
    scope, place = _place(args)
    body = {"name": args.name, scope: place}
    if args.embedding_model:
        body["embedding_model"] = args.embedding_model
    made = client(args).call("POST", "/api/v1/kb", body)["knowledge_base"]
    if args.json:
        emit_json(made)
    else:
        print(f"{made['id']}: {made['name']} for {_owner(made)}, embedded by {made['embedding_model']}")
    return 0


def run_delete(args) -> int:
    gone = client(args).call("DELETE", f"/api/v1/kb/{args.id}")["knowledge_base"]
    if args.json:
        emit_json(gone)
    else:
        print(f"deleted {gone['id']} ({gone['name']}, {_owner(gone)}) and its {gone['files']['total']} files' "
              "passages")
    return 0


def run_grant(args) -> int:
    scope, place = _place(args)
    given = client(args).call("POST", f"/api/v1/kb/{args.id}/grants",
                              {"scope": scope, "place": place, "access": "write" if args.write else "read"})["grant"]
    if args.json:
        emit_json(given)
    else:
        print(f"{args.id} given to {given['scope']} {given['place']} to {given['access']}")
    return 0


def run_revoke(args) -> int:
    scope, place = _place(args)
    taken = client(args).call("POST", f"/api/v1/kb/{args.id}/revoke", {"scope": scope, "place": place})["revoked"]
    if args.json:
        emit_json(taken)
    else:
        print(f"{args.id} no longer given to {taken['scope']} {taken['place']}")
    return 0
