"""`llmgw kb sync` (and the `llmgw-kb` command): folders kept in a knowledge base from this machine (llmgw.kb.tool)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def register(commands) -> None:
    kb = commands.add_parser(
        "kb", help="keep this machine's folders in a knowledge base (also the llmgw-kb command)",
        description="Knowledge bases from the machine that holds the documents. The documents are read and cut "
                    "into passages here; only the passages are sent, and the gateway embeds them as the key given, "
                    "so its limits, budget and guardrails hold. docs/knowledge.md.")
    actions = kb.add_subparsers(dest="action", metavar="ACTION", required=True)
    sync = actions.add_parser(
        "sync", help="send what is new or changed in FOLDER…, delete what was deleted",
        description="Make the knowledge base hold FOLDER…'s documents as they are now: those new or changed "
                    "(by sha256) are sent, those deleted here are deleted there, the rest is left. Reads PDF, Word "
                    "(.docx), Excel (.xlsx), PowerPoint (.pptx), HTML, Markdown and text. A document is named by "
                    "its path under the folder; with several folders, each folder's own name comes first. The "
                    "knowledge base mirrors the folders synced into it: a document of it that is not in them is "
                    "deleted.")
    sync.add_argument("folders", nargs="+", metavar="FOLDER", type=Path)
    sync.add_argument("--kb", required=True, metavar="NAME",
                      help="the knowledge base, by name or id; made (by that name) if there is none")
    sync.add_argument("--embedding-model", metavar="MODEL",
                      help="the model that embeds a knowledge base made now (default: the gateway's "
                           "router.knowledge.embedding_model)")
    sync.add_argument("--url", default=os.environ.get("LLMGW_URL") or os.environ.get("OPENAI_BASE_URL"),
                      help="the gateway's client address, e.g. https://llm.example.com (default: $LLMGW_URL, "
                           "else $OPENAI_BASE_URL)")
    sync.add_argument("--key-file", type=Path, metavar="PATH",
                      help="a file holding the API key (default: $LLMGW_API_KEY, else $OPENAI_API_KEY)")
    sync.add_argument("--include", action="append", default=[], metavar="GLOB",
                      help="only documents matching it (`*.pdf` a file's name, `reports/**/*.xlsx` a path); again "
                           "for more")
    sync.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="leave out documents matching it")
    sync.add_argument("--hidden", action="store_true", help="read hidden files and folders too (left out by default)")
    sync.add_argument("--dry-run", action="store_true",
                      help="send nothing: say what would be sent and deleted (with -v, every passage as it would "
                           "leave this machine)")
    sync.add_argument("-v", "--verbose", action="store_true", help="list unchanged documents too")
    sync.set_defaults(run=run_sync)


def _key(args: argparse.Namespace) -> str | None:
    if args.key_file is not None:
        try:
            return args.key_file.read_text().strip() or None
        except OSError as e:
            print(f"llmgw-kb: the key file {args.key_file} cannot be read ({e.strerror})", file=sys.stderr)
            return None
    return os.environ.get("LLMGW_API_KEY") or os.environ.get("OPENAI_API_KEY")


def run_sync(args: argparse.Namespace) -> int:
    from llmgw.kb import Gateway, KbToolError, sync

    if not args.url:
        print("llmgw-kb: give the gateway's address: --url https://llm.example.com (or set LLMGW_URL)",
              file=sys.stderr)
        return 2
    key = _key(args)
    if key is None:
        print("llmgw-kb: give an API key: --key-file PATH (or set LLMGW_API_KEY)", file=sys.stderr)
        return 2
    try:
        outcome = sync(Gateway(args.url, key), args.kb, args.folders, model=args.embedding_model,
                       include=args.include, exclude=args.exclude, hidden=args.hidden, dry_run=args.dry_run,
                       verbose=args.verbose, say=lambda line: print(line, flush=True))
    except KbToolError as e:
        print(f"llmgw-kb: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("llmgw-kb: stopped; what was sent is kept, and the next sync carries on", file=sys.stderr)
        return 130
    verb = "would send" if args.dry_run else "sent"
    print(f"{verb} {outcome.passages if args.dry_run else outcome.sent} "
          f"{'passages' if args.dry_run else 'documents'} ({outcome.bytes_sent} bytes), {outcome.unchanged} "
          f"unchanged, {outcome.deleted} {'to delete' if args.dry_run else 'deleted'}, {outcome.failed} failed")
    return 1 if outcome.failed else 0


def main(argv: list[str] | None = None) -> int:
    """The `llmgw-kb` command: `llmgw kb`."""
    from llmgw.cli.main import main as llmgw

    return llmgw(["kb", *(sys.argv[1:] if argv is None else argv)])
