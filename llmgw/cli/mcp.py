"""`llmgw ctl mcp`: the company's MCP servers behind /mcp (docs/mcp.md): add, list, test, remove."""

from __future__ import annotations

import argparse
import os

from llmgw.cli.ctl import client
from llmgw.cli.output import emit_json, table
from llmgw.control import AdminError

_EPILOG = """examples:
  llmgw ctl mcp add jira --url https://jira.internal/mcp --description "Acme Jira" \\
      --secret-file Authorization=/root/jira-token
  llmgw ctl mcp test jira
  llmgw keys limits --scope team --id Acme/support --tools 'jira.*'
  llmgw ctl mcp add llmgw --url llmgw:admin      (the cluster's own read-only tools)"""


def register(sub, common) -> None:
    mcp = sub.add_parser("mcp", help="the company's MCP servers served at /mcp",
                         description="Register the company's MCP servers once; agents reach their tools at /mcp "
                                     "with their llmgw key, as `keys limits --tools` grants them.",
                         epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = mcp.add_subparsers(dest="mcp_command", metavar="ACTION")
    add = actions.add_parser("add", parents=[common], help="register a server, or change one with --replace",
                             epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add.add_argument("name", help="the server's name; its tools are NAME.tool")
    where = add.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="its streamable HTTP address, or llmgw:admin for the cluster's own tools")
    where.add_argument("--stdio", metavar="COMMAND",
                       help="run it on each control plane as this command line, spoken to over its standard input "
                            "and output; its --header/--header-ref/--secret-file are its environment variables")
    add.add_argument("--user", metavar="NAME",
                     help="with --stdio: the user it runs as when llmgw is root (default llmgw-mcp, made if "
                          "missing; '' for llmgw's own user)")
    add.add_argument("--description", default="", help="what it is, for people")
    add.add_argument("--secret-file", action="append", default=[], metavar="HEADER=FILE",
                     help="a header whose value is read from FILE now and kept sealed in the store")
    add.add_argument("--header-ref", action="append", default=[], metavar="HEADER=REF",
                     help="a header read at each call from REF: an absolute file path, env:NAME or store:NAME")
    add.add_argument("--header", action="append", default=[], metavar="HEADER=VALUE",
                     help="a header that is not secret, sent as it is")
    add.add_argument("--timeout", type=_seconds, default=60.0, help="seconds a call may take (default 60)")
    add.add_argument("--rate", type=_count, help="calls a minute each caller may make to its tools")
    add.add_argument("--disabled", action="store_true", help="keep it registered but serve none of its tools")
    add.add_argument("--allow-private", action="store_true",
                     help="allow an address on loopback, link-local or a cloud's metadata service")
    add.add_argument("--replace", action="store_true", help="change the server of that name, whole")
    add.set_defaults(run=run_add)
    listing = actions.add_parser("list", parents=[common], help="the registered servers")
    listing.set_defaults(run=run_list)
    test = actions.add_parser("test", parents=[common], help="ask a server for its tools, with its credentials")
    test.add_argument("name")
    test.set_defaults(run=run_test)
    remove = actions.add_parser("remove", parents=[common], help="stop serving a server and forget it")
    remove.add_argument("name")
    remove.set_defaults(run=run_remove)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def _pairs(flag: str, given: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value:
            raise AdminError(f"{flag} takes HEADER=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def _secret(header: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
    except FileNotFoundError:
        raise AdminError(f"--secret-file {header}: there is no file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AdminError(f"--secret-file {header}: {path} cannot be read: {e}") from None
    if not value or "\n" in value:
        raise AdminError(f"--secret-file {header}: {path} must hold the header's value on one line")
    return value


def run_add(args) -> int:
    secrets = {h: _secret(h, os.path.expanduser(p)) for h, p in _pairs("--secret-file", args.secret_file).items()}
    url = args.url if args.url else "stdio:" + args.stdio
    payload = {"name": args.name, "url": url, "description": args.description,
               "headers": _pairs("--header", args.header), "header_refs": _pairs("--header-ref", args.header_ref),
               "secrets": secrets, "timeout": args.timeout, "rate": args.rate, "disabled": args.disabled,
               "allow_private": args.allow_private, "replace": args.replace}
    if args.user is not None:
        payload["run_as"] = args.user
    server = client(args).call("POST", "/api/v1/mcp/servers", payload)
    if args.json:
        emit_json(server)
    else:
        state = "kept, serving nothing" if server["disabled"] else "served"
        print(f"MCP server {server['name']} at {server['url']} is {state}; its tools are {server['name']}.*, "
              "granted with llmgw keys limits --tools. Every control plane serves the change within 30 s.")
    return 0


def run_list(args) -> int:
    servers = client(args).call("GET", "/api/v1/mcp/servers")
    if args.json:
        emit_json(servers)
        return 0
    if not servers:
        print("no MCP servers; llmgw ctl mcp add NAME --url … registers one")
        return 0
    def headers(s: dict) -> str:
        return ", ".join([*s["headers"], *s["header_refs"], *(f"{h} (sealed)" for h in s["secret_headers"])]) or "-"

    table(["name", "url", "headers", "timeout", "rate", "state", "description"], [
        (s["name"], s["url"], headers(s), f"{s['timeout']:g} s", f"{s['rate']}/min" if s["rate"] else "-",
         "disabled" if s["disabled"] else "served", s["description"]) for s in servers])
    return 0


def run_test(args) -> int:
    answer = client(args).call("POST", f"/api/v1/mcp/servers/{args.name}/test")
    if args.json:
        emit_json(answer)
        return 0
    print(f"{answer['name']} answered with {len(answer['tools'])} tool{'s' if len(answer['tools']) != 1 else ''}")
    table(["tool", "description"], [(t["name"], t["description"]) for t in answer["tools"]])
    return 0


def run_remove(args) -> int:
    server = client(args).call("DELETE", f"/api/v1/mcp/servers/{args.name}")
    if args.json:
        emit_json(server)
    else:
        print(f"MCP server {server['name']} is removed; every control plane stops serving it within 30 s")
    return 0
