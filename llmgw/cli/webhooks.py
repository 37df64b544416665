"""`llmgw ctl webhooks`: where the events go (docs/webhooks.md)."""

from __future__ import annotations

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, table, when
from llmgw.errors import N_, ExpectedError


def register(sub, common) -> None:
    from llmgw.cli.tree import _shared_without_defaults as shared

    hooks = sub.add_parser("webhooks", parents=[common], help="where events go: budgets, keys, nodes, guardrails",
                           description="Without an action, lists the webhooks. Each event (a budget at 80 % or "
                                       "100 %, a key revoked or expired, a node lost, a replica failed, a "
                                       "guardrail's block, an outside key refused, a new leader) is kept in the "
                                       "store and sent, signed, until the webhook takes it (docs/webhooks.md).")
    hooks.set_defaults(run=run_list)
    actions = hooks.add_subparsers(dest="webhooks_command", metavar="ACTION")

    add = actions.add_parser("add", parents=[shared()], help="send events to a URL",
                             description="Send events to URL: as JSON, or as Slack's {\"text\": …} with "
                                         "--format slack. A URL on this machine, at a link-local or at a cloud "
                                         "metadata address is refused unless --allow-private.")
    add.add_argument("url")
    add.add_argument("--events", metavar="K1,K2", help="only these kinds (default: all); docs/webhooks.md lists them")
    add.add_argument("--format", choices=("json", "slack"), default="json", help="json (default) or slack")
    add.add_argument("--secret-file", metavar="FILE",
                     help="sign each delivery with the secret on this file's first line (X-Llmgw-Signature); it "
                          "is sealed in the store and never shown again")
    add.add_argument("--allow-private", action="store_true",
                     help="let the URL be on this machine or at a link-local address")
    add.add_argument("--place", metavar="PLACE",
                     help="only the events of org:NAME or team:ORG/TEAM (its budgets, keys and guardrails); a "
                          "tenant administrator's webhook names one of theirs (docs/people.md)")
    add.set_defaults(run=run_add)

    listing = actions.add_parser("list", parents=[shared()], help="the webhooks")
    listing.set_defaults(run=run_list)

    test = actions.add_parser("test", parents=[shared()], help="send a test event now and say how it answered")
    test.add_argument("id")
    test.set_defaults(run=run_test)

    deliveries = actions.add_parser("deliveries", parents=[shared()], help="what was sent, is pending or failed")
    deliveries.add_argument("id", nargs="?", help="only this webhook's")
    deliveries.add_argument("--state", choices=("pending", "delivered", "failed"))
    deliveries.add_argument("--limit", type=int, default=50, help="how many, newest first (default 50)")
    deliveries.set_defaults(run=run_deliveries)

    remove = actions.add_parser("remove", parents=[shared()], help="stop sending to a webhook")
    remove.add_argument("id")
    remove.set_defaults(run=run_remove)


def run_add(args) -> int:
    body: dict = {"url": args.url, "format": args.format, "allow_private": args.allow_private}
    if args.place:
        body["place"] = args.place
    if args.events:
        body["events"] = [e.strip() for e in args.events.split(",") if e.strip()]
    if args.secret_file:
        from llmgw.notify import read_secret_file

        try:
            body["secret"] = read_secret_file(args.secret_file)
        except OSError as e:
            raise ExpectedError(N_("--secret-file {path}: {reason}"),
                                params={"path": args.secret_file, "reason": e.strerror or str(e)}) from None
    hook = client(args).call("POST", "/api/v1/webhooks", body)["webhook"]
    if args.json:
        emit_json(hook)
        return 0
    whose = f", of {args.place} only" if args.place else ""
    print(f"added webhook {hook['id']}: {hook['url']} ({_events(hook)}{whose}, {hook['format']}"
          f"{', signed' if hook['signed'] else ''}); `llmgw ctl webhooks test {hook['id']}` tries it")
    return 0


def _events(hook: dict) -> str:
    return "all events" if hook["events"] == ["*"] else ", ".join(hook["events"])


def run_list(args) -> int:
    hooks = client(args).call("GET", "/api/v1/webhooks")["webhooks"]
    if args.json:
        emit_json(hooks)
        return 0
    if not hooks:
        print("no webhooks; `llmgw ctl webhooks add URL` adds one")
        return 0
    table(["id", "url", "events", "format", "signed", "private ok", "added"],
          [(h["id"], h["url"], _events(h), h["format"], "yes" if h["signed"] else "no",
            "yes" if h["allow_private"] else "no", when(h["created_at"])) for h in hooks])
    return 0


def run_test(args) -> int:
    delivery = client(args).call("POST", f"/api/v1/webhooks/{args.id}/test")["delivery"]
    if args.json:
        emit_json(delivery)
        return 0 if delivery["state"] == "delivered" else 1
    if delivery["state"] == "delivered":
        print(f"{delivery['url']} answered {delivery['last_status']}: the test event {delivery['id']} was taken")
        return 0
    print(f"{delivery['url']} did not take the test event: {delivery['last_error']}")
    return 1


def run_deliveries(args) -> int:
    rows = client(args).call("GET", "/api/v1/webhooks/deliveries",
                             query={"webhook": args.id, "state": args.state, "limit": args.limit})["deliveries"]
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no deliveries")
        return 0
    table(["id", "webhook", "event", "state", "attempts", "last answer", "at"],
          [(d["id"], d["webhook_id"], d["event"], d["state"], d["attempts"],
            d["last_error"] or (d["last_status"] if d["last_status"] is not None else "-"),
            when(d["delivered_at"] or d["created_at"])) for d in rows])
    return 0


def run_remove(args) -> int:
    hook = client(args).call("DELETE", f"/api/v1/webhooks/{args.id}")["webhook"]
    if args.json:
        emit_json(hook)
        return 0
    print(f"removed webhook {hook['id']} ({hook['url']}); what it had pending is not sent")
    return 0
