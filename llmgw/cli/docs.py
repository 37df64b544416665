"""`llmgw docs reference`: docs/reference.md, written from the configuration's own dataclasses."""

from __future__ import annotations


def register(commands) -> None:
    docs = commands.add_parser("docs", help="write documentation generated from the program")
    sub = docs.add_subparsers(dest="docs_command", metavar="WHAT")
    ref = sub.add_parser("reference", help="every configuration key, its type, default and meaning")
    ref.add_argument("--output", default="docs/reference.md", metavar="PATH",
                     help="where to write it (default docs/reference.md); - for standard output")
    ref.set_defaults(run=run_reference)


def run_reference(args) -> int:
    from llmgw.config.reference import render_reference, write_reference

    if args.output == "-":
        print(render_reference(), end="")
        return 0
    write_reference(args.output)
    print(f"wrote {args.output}")
    return 0
