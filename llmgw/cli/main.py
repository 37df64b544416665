"""The `llmgw` command: one program, every part of the system as a subcommand.

Exit codes: 0 done, 1 refused (with a sentence saying why), 2 a usage error.

Building the parser imports every command's module, so those modules import
at their top only what their parsers need; a command imports what it runs
with when it runs (issue 26: `llmgw --help` took 0.5 s, most of it aiohttp
and asyncssh). tests/cli/test_lean_imports.py holds it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import NoReturn, TextIO

from llmgw import __version__


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own, with our prefix and exit code 2
        self.print_usage(sys.stderr)
        self.exit(2, f"llmgw: {message}\n")


def admin_options() -> argparse.ArgumentParser:
    """Options every command that talks to the admin API takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin", metavar="ADDR",
                        help="the admin API's address (default $LLMGW_ADMIN, else server.yaml's listen.admin, "
                             "else 127.0.0.1:9090)")
    common.add_argument("--token-file", metavar="PATH",
                        help="the admin token (default $LLMGW_TOKEN_FILE, else the one $LLMGW_CONFIG's "
                             "server.yaml names, else var/admin-token of the checkout this is run in, found "
                             "walking up from here as git finds its folder, else the one /etc/llmgw/server.yaml "
                             "names: admin-token in its data_dir, /var/lib/llmgw/admin-token by default)")
    common.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    return common


# Each top-level command, in the order `llmgw --help` lists them: the llmgw.cli module that registers it, and
# whether its parser takes the admin API's options. tests/cli/test_parser.py holds the table to what each
# module registers.
COMMANDS: dict[str, tuple[str, bool]] = {
    "server": ("server", False),
    "agent": ("agent", False),
    "ctl": ("ctl", True),
    "keys": ("keys", True),
    "people": ("people", True),
    "docs": ("docs", False),
    "node": ("node", True),
    "join": ("node", True),
    "onboard": ("onboard", False),
    "doctor": ("doctor", False),
    "firewall": ("firewall", False),
    "upgrade": ("upgrade", True),
    "upgrade-watchdog": ("upgrade", True),
    "upgrade-apply": ("upgrade", True),
    "sim-engine": ("sim", False),
    "llama-server": ("llama_server", False),
    "setup": ("setup", False),
    "stop": ("stop", False),
    "mirror": ("mirror", False),
    "strata-serve": ("strata", False),
    "console": ("console", False),
    "kb": ("kb", False),
}


def build_parser(command: str | None = None) -> Parser:
    """The `llmgw` parser: every command's, or only `command`'s when it names one.

    One command's parser is what a process started as `llmgw server …` (or
    agent, sim-engine, ctl …) needs: building all of them cost 31 ms of CPU
    a start against 2 ms for the server's alone, and the suite starts over a
    thousand llmgw processes. A name that is no command (a typo, `--help`)
    gets them all, so argparse can list them.
    """
    parser = Parser(prog="llmgw", description="llmgw: your machines as one private, OpenAI-compatible LLM service.")
    parser.add_argument("--version", action="version", version=f"llmgw {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    common = admin_options()
    owner = COMMANDS.get(command or "")
    wanted = [owner] if owner else list(dict.fromkeys(COMMANDS.values()))
    for module_name, takes_common in wanted:
        # __import__ rather than importlib.import_module: only the former is counted by `python -X importtime`,
        # which bench cli and tests/cli/test_lean_imports.py read.
        module = __import__(f"llmgw.cli.{module_name}", fromlist=["register"])
        if takes_common:
            module.register(commands, common)
        else:
            module.register(commands)
    return parser


def main(argv: list[str] | None = None, parser: Parser | None = None) -> int:
    from llmgw import stopsignals

    # Until the command is known: a server, agent, mirror or sim-engine takes them once its loop can stop cleanly,
    # every other command at once (llmgw/stopsignals.py says what a signal in a starting program did).
    before = stopsignals.hold()
    try:
        return _main(argv, parser)
    finally:
        # Whatever way the command ended (a usage error ends before any release): a caller in this process
        # (the tests' in-process CLI, a console screen) gets its own mask back. A thread left blocking them
        # started children SIGTERM could not stop (the CI of 2026-12-07: a test's MCP server outlived its 10 s).
        stopsignals.restore(before)


def _main(argv: list[str] | None, parser: Parser | None) -> int:
    from llmgw import stopsignals
    from llmgw.errors import explain

    if not (sys.argv[1:] if argv is None else argv):
        # `sudo llmgw`: the console, the node's overview or setup, as `llmgw console` chooses.
        argv = ["console"]
    given = sys.argv[1:] if argv is None else argv
    parser = parser or build_parser(given[0] if given else None)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        build_parser().print_help(sys.stderr)  # every command's, where `parser` may hold one
        return 2
    if not stopsignals.taken_by(args.run):
        stopsignals.release()
    try:
        status = args.run(args) or 0
        # Flushed here, not at exit: a pipe closed before the last of the
        # output went is then met below rather than as a message at exit.
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # `llmgw ctl audit | head`: the reader has all it wanted. Ended
        # quietly, as a Unix tool ended by SIGPIPE is (128 + 13), with stdout
        # pointed at /dev/null so that the flush at exit does not raise again.
        quiet_stdout()
        return 141
    except KeyboardInterrupt:
        print("llmgw: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the last place an error can become a sentence
        sentence = explain(e)
        if sentence is None:
            if os.environ.get("LLMGW_DEBUG"):
                import traceback

                traceback.print_exc()
            sentence = (f"unexpected {type(e).__name__}: {e} (this is a bug in llmgw; "
                        "LLMGW_DEBUG=1 shows where)")
        print(f"llmgw: {sentence}", file=sys.stderr)
        return 1


# run() swaps the process's sys.stdout and sys.stderr for a call's: one call at a time.
_running = threading.Lock()


@functools.cache
def _built_once() -> Parser:
    """The parser, for every run() in this process: building it is 25-40 ms, more than a `ctl` call's own work.

    Parsing leaves a parser as it was (each parse makes its own namespace, and
    argparse copies an `append` default before adding to it), so one serves
    any number of calls.
    """
    return build_parser()


def run(argv: Sequence[str], stdout: TextIO, stderr: TextIO, stdin: TextIO | None = None) -> int:
    """One `llmgw` command in this process, as `llmgw ARGV…` would run it; its exit status.

    What it prints goes to `stdout` and `stderr` (and reads come from
    `stdin`, when given) rather than the process's own, and SystemExit (a
    usage error, --help) becomes the status instead of ending the process.
    For the commands that call a control plane and print (`ctl`, `keys`,
    `people`, `node add`, `upgrade`): the tests run them this way, skipping
    the interpreter's start (tests/support/servers.py `Server.ctl`). Those
    that serve until signalled (`server`, `agent`, `sim-engine`), exec
    (`llama-server`) or draw on a terminal (`console`, `setup`) set up the
    process's logging, signals or terminal: they need a process of their own.

    The streams are swapped in sys for the call, so calls are taken one at a
    time; a `stdout` with a `.buffer` lets a command write bytes (`ctl usage
    export`).
    """
    with _running, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), _reading(stdin):
        try:
            return main(list(argv), _built_once())
        except SystemExit as e:
            # As the interpreter ends on it: None is 0, a number the status, anything else said on stderr and 1.
            if e.code is None or isinstance(e.code, int):
                return e.code or 0
            print(e.code, file=sys.stderr)
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


@contextlib.contextmanager
def _reading(stdin: TextIO | None) -> Iterator[None]:
    if stdin is None:
        yield
        return
    before, sys.stdin = sys.stdin, stdin
    try:
        yield
    finally:
        sys.stdin = before


def quiet_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a closed pipe is dropped, not raised at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout to speak of (closed, or replaced by a test)
        pass


if __name__ == "__main__":
    sys.exit(main())
