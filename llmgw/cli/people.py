"""`llmgw people`: the people who sign in to the portal, their roles, places and passwords."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from llmgw.cli.ctl import client
from llmgw.cli.output import ago, emit_json, fields, table
from llmgw.control import AdminError

# llmgw.account.ROLES, written out: importing the account package costs every `llmgw` command
# half a second, and the server refuses a role it does not know anyway (a test keeps the two the same).
ROLES = ("admin", "operator", "member")
PLACE_HELP = "org:NAME, team:ORG/TEAM or project:ORG/TEAM/PROJECT"
SHOWN_ONCE = "Shown once and kept nowhere: give it to them now. They must choose their own at their next sign-in."


def register(commands, common) -> None:
    people = commands.add_parser(
        "people", help="people who sign in to the portal",
        description=textwrap.fill("Add people, change their role and places, suspend them and reset their "
                                  "passwords. Each change is written to the audit log (llmgw ctl audit). "
                                  "docs/people.md has the rest.", 79),
        epilog="examples:\n"
               "  llmgw people add bea@example.com --name 'Bea Lee' --member-of team:Acme/Research\n"
               "  printf '%s\\n' \"$PW\" | llmgw people add cy@example.com --name Cy --password-stdin\n"
               "  llmgw people role bea@example.com operator\n"
               "  llmgw people suspend bea@example.com\n"
               "  llmgw people reset-password cy@example.com\n"
               "  llmgw people link ada@example.com oidc 'https://login.example.com#248289761001'\n"
               "  llmgw people admin bea@example.com team:Acme/Research\n"
               "  llmgw people token bea@example.com --output bea.token",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = people.add_subparsers(dest="people_command", metavar="COMMAND")

    add = sub.add_parser("add", parents=[common], help="add a person (a password made for them is printed once)")
    add.add_argument("email")
    add.add_argument("--name", required=True, help="their name, as the portal shows it")
    add.add_argument("--role", choices=ROLES, default="member", help="what they may do (default member)")
    add.add_argument("--member-of", action="extend", nargs="+", default=[], metavar="PLACE",
                     help=f"where they belong: {PLACE_HELP}; the place must exist (llmgw ctl tree)")
    add.add_argument("--password-stdin", action="store_true",
                     help="read their password from the first line of standard input; without it one is "
                          "made, printed once, and must be changed at their first sign-in")
    add.set_defaults(run=run_add)

    listing = sub.add_parser("list", parents=[common], help="everyone")
    listing.set_defaults(run=run_list)

    show = sub.add_parser("show", parents=[common], help="one person, their places and open sessions")
    show.add_argument("email", help="their e-mail or usr_ id")
    show.set_defaults(run=run_show)

    role = sub.add_parser("role", parents=[common], help="change a person's role")
    role.add_argument("email", help="their e-mail or usr_ id")
    role.add_argument("role", choices=ROLES)
    role.set_defaults(run=run_role)

    suspend = sub.add_parser("suspend", parents=[common],
                             help="refuse a person's sign-in and end their sessions (--lift to let them in again)")
    suspend.add_argument("email", help="their e-mail or usr_ id")
    suspend.add_argument("--lift", action="store_true", help="let them sign in again")
    suspend.set_defaults(run=run_suspend)

    reset = sub.add_parser("reset-password", parents=[common],
                           help="give a person a new password (printed once) and end their sessions")
    reset.add_argument("email", help="their e-mail or usr_ id")
    reset.set_defaults(run=run_reset)

    link = sub.add_parser(
        "link", parents=[common],
        help="tie a directory's identity to a person on purpose (what a refused sign-in's sentence names)",
        description=textwrap.fill(
            "A directory's person is tied to an existing account by e-mail only when the directory vouches for "
            "the e-mail (docs/sign-in.md); otherwise their sign-in is refused with the command to run here. "
            "SOURCE is oidc, ldap or scim; SUBJECT is the id the refusal names (OIDC: ISSUER#SUBJECT, LDAP: the "
            "objectGUID or entryUUID) or, for SCIM, the userName the provider will push. The break-glass "
            "account (auth.break_glass) is never linked.", 79))
    link.add_argument("email", help="their e-mail or usr_ id")
    link.add_argument("source", choices=("oidc", "ldap", "scim"))
    link.add_argument("subject", help="the directory's id for them, as the refusal names it")
    link.set_defaults(run=run_link)

    for verb, helptext in (("join", "make a person a member of a place"),
                           ("leave", "take a person out of a place")):
        p = sub.add_parser(verb, parents=[common], help=helptext)
        p.add_argument("email", help="their e-mail or usr_ id")
        p.add_argument("place", help=PLACE_HELP)
        p.set_defaults(run=run_join if verb == "join" else run_leave)

    admin = sub.add_parser("admin", parents=[common], help="make a person the administrator of an org or a team",
                           description="An org's or a team's administrator adds and suspends its people, makes "
                                       "and revokes its keys, sets limits below it and reads its usage and audit "
                                       "log, and nothing above or beside it (docs/people.md).")
    admin.add_argument("email", help="their e-mail or usr_ id")
    admin.add_argument("place", help="org:NAME or team:ORG/TEAM")
    admin.add_argument("--remove", action="store_true", help="no longer its administrator (still a member)")
    admin.set_defaults(run=run_admin)

    token = sub.add_parser("token", parents=[common], help="a token of a person's own for llmgw people, keys, ctl",
                           description="What a tenant administrator gives --token-file, with --admin naming this "
                                       "control plane's admin API. It acts as them, within what they administer "
                                       "at each call. Printed once, or written to --output (0600).")
    token.add_argument("email", help="their e-mail or usr_ id")
    token.add_argument("--output", metavar="FILE", help="write it to a new file only its owner reads")
    token.set_defaults(run=run_token)
    tokens = sub.add_parser("tokens", parents=[common], help="a person's tokens (never their secrets)")
    tokens.add_argument("email", help="their e-mail or usr_ id")
    tokens.set_defaults(run=run_tokens)
    revoke = sub.add_parser("revoke-token", parents=[common], help="refuse one of a person's tokens from now on")
    revoke.add_argument("email", help="their e-mail or usr_ id")
    revoke.add_argument("id", help="the token's pat_ id, as llmgw people tokens lists it")
    revoke.set_defaults(run=run_revoke_token)


def run_add(args) -> int:
    password = None
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise AdminError("--password-stdin read an empty line; write the password on standard input")
    person = client(args).person_add(args.email, args.name, role=args.role, password=password,
                                     member_of=args.member_of)
    if args.json:
        emit_json(person)
        return 0
    _person_fields(person)
    if person.get("password"):
        print(f"\npassword: {person['password']}\n{SHOWN_ONCE}")
    return 0


def run_list(args) -> int:
    people = client(args).people()
    if args.json:
        emit_json(people)
        return 0
    table(["email", "name", "role", "state", "id", "added"], [
        (p["email"], p["name"], p["role"], _state(p), p["id"], ago(p["created_at"])) for p in people
    ])
    return 0


def run_show(args) -> int:
    person = client(args).person(args.email)
    if args.json:
        emit_json(person)
        return 0
    _person_fields(person)
    sessions = person.get("sessions") or []
    if sessions:
        print()
        table(["session from", "browser", "signed in", "last seen", "ends"], [
            (s["address"] or "-", _short(s["agent"]) or "-", ago(s["created_at"]), ago(s["last_seen_at"]),
             ago(s["expires_at"])) for s in sessions
        ])
    return 0


def run_role(args) -> int:
    person = client(args).person_role(args.email, args.role)
    return _said(args, person, f"{person['email']} is now {_a(person['role'])}")


def run_suspend(args) -> int:
    person = client(args).person_suspend(args.email, lift=args.lift)
    if args.lift:
        return _said(args, person, f"{person['email']} may sign in again")
    return _said(args, person, f"{person['email']} is suspended: their sign-in and their API keys are refused "
                               "and every session of theirs has ended (--lift lets them in again)")


def run_reset(args) -> int:
    person = client(args).person_reset_password(args.email)
    if args.json:
        emit_json(person)
        return 0
    print(person["password"])
    print(f"\nThe new password of {person['email']}; every session of theirs has ended. {SHOWN_ONCE}")
    return 0


def run_link(args) -> int:
    person = client(args).person_link(args.email, args.source, args.subject)
    if args.source == "scim":
        return _said(args, person, f"{person['email']} is linked to the SCIM userName {args.subject}: the "
                                   "provider's next push of that user takes this account")
    return _said(args, person, f"{person['email']} is tied to {args.source} {args.subject}: that directory's "
                               "person signs in to this account from now on")


def run_join(args) -> int:
    person = client(args).person_membership(args.email, args.place)
    return _said(args, person, f"{person['email']} belongs to {_places(person)}")


def run_leave(args) -> int:
    person = client(args).person_membership(args.email, args.place, remove=True)
    places = _places(person)
    return _said(args, person, f"{person['email']} " + (f"belongs to {places}" if person["member_of"]
                                                        else "belongs to no place now"))


def run_admin(args) -> int:
    person = client(args).person_administer(args.email, args.place, remove=args.remove)
    held = ", ".join(person.get("administers") or []) or "nothing"
    return _said(args, person, f"{person['email']} administers {held}")


def run_token(args) -> int:
    made = client(args).person_token(args.email)
    if args.output:
        from llmgw.privatefile import create_private

        if not create_private(args.output, made["token"].encode(), "the token", AdminError):
            raise AdminError(f"{args.output} exists already; name a new file, so no token is overwritten")
    if args.json:
        emit_json({k: v for k, v in made.items() if k != "token" or not args.output})
        return 0
    if args.output:
        print(f"The token {made['id']} ({made['prefix']}…) is in {args.output}, readable only by you. Give it "
              "with --token-file, and this control plane's admin API with --admin.")
        return 0
    print(made["token"])
    print(f"\nThe token {made['id']}: shown once and kept nowhere. Keep it in a file only you read, and give it "
          "with --token-file.")
    return 0


def run_tokens(args) -> int:
    found = client(args).person_tokens(args.email)
    if args.json:
        emit_json(found)
        return 0
    table(["id", "prefix", "state", "made", "last used"], [
        (t["id"], t["prefix"] + "…", t["state"], ago(t["created_at"]), ago(t.get("last_used_at")))
        for t in found])
    return 0


def run_revoke_token(args) -> int:
    revoked = client(args).person_token_revoke(args.email, args.id)
    if args.json:
        emit_json(revoked)
    else:
        print(f"The token {revoked['id']} is refused from now on.")
    return 0


def _said(args, person: dict[str, Any], sentence: str) -> int:
    if args.json:
        emit_json(person)
    else:
        print(sentence)
    return 0


def _person_fields(person: dict[str, Any]) -> None:
    fields([
        ("email", person["email"]), ("name", person["name"]), ("id", person["id"]), ("role", person["role"]),
        ("state", _state(person)), ("member of", _places(person)),
        *([("administers", ", ".join(person["administers"]))] if person.get("administers") else []),
        ("added", ago(person["created_at"])), ("password set", ago(person.get("password_changed_at"))),
        ("language", person.get("locale") or "from the browser"),
        *([("sessions", str(len(person["sessions"])))] if "sessions" in person else []),
    ])


def _state(person: dict[str, Any]) -> str:
    if person["state"] == "active" and person.get("must_change_password"):
        return "active (must change password)"
    return person["state"]


def _places(person: dict[str, Any]) -> str:
    return ", ".join(person.get("member_of") or []) or "-"


def _a(role: str) -> str:
    return f"an {role}" if role[0] in "aeiou" else f"a {role}"


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "…"
