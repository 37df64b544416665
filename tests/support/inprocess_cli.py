"""`llmgw …` run in the test's own process: what `Server.ctl` does with the commands that only call a control plane.

A subprocess of `python -m llmgw` took 0.6-0.85 s on a busy 2-core machine,
nearly all of it the interpreter starting and importing llmgw; the tests
make 372 such calls, some in polling loops (issue 26). `llmgw.cli.main.run`
runs the same parser and the same command, with the output captured, in
this process.

The tests about the CLI as a program (its exit codes, what a terminal
shows, `llmgw` on a PATH) keep the real process: `tests.support.servers.llmgw`.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from collections.abc import Sequence

from llmgw.cli.main import run

# First words of the commands that only call the admin API and print: safe in this process.
# Anything else (`server`, `agent`, `sim-engine`, `console`, … which set up logging or
# signals, exec, or draw on a terminal) keeps a process of its own.
IN_PROCESS = ("ctl", "keys", "people", "node", "upgrade")


def runs_here(argv: Sequence[str]) -> bool:
    """Whether `argv` can run in this process; else it needs one of its own, and why is said here.

    `node add --ssh` is an install over SSH: asyncssh logs through the process's logging, which pytest
    takes over (a person and the tests read those lines on the program's stderr), and the install takes
    many seconds, beside which the 0.7 s saved do not count.
    """
    if not argv or argv[0] not in IN_PROCESS:
        return False
    return not (argv[0] == "node" and "--ssh" in argv)


def llmgw_here(argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`llmgw ARGV…` run here, as `subprocess.run(…, capture_output=True, text=True)` would report it.

    In a thread of its own: a test calling this from a running event loop
    (pytest-asyncio) would otherwise have a command's asyncio.run refused.
    stdin reads as empty, as /dev/null does. stdout has a byte buffer under
    it, as a real one has, for the commands that write bytes.
    """
    out, err = _captured(), _captured()
    status: list[int] = []
    failed: list[BaseException] = []

    def call() -> None:
        try:
            status.append(run(argv, out, err, stdin=io.StringIO("")))
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread, raised there
            failed.append(e)

    worker = threading.Thread(target=call, name=f"llmgw {' '.join(argv[:2])}", daemon=True)
    worker.start()
    worker.join(timeout)
    command = [sys.executable, "-m", "llmgw", *argv]
    if worker.is_alive():
        # A thread cannot be stopped from outside: this one is left to end when its calls time out.
        raise subprocess.TimeoutExpired(command, timeout, output=_text(out), stderr=_text(err))
    if failed:
        raise failed[0]
    return subprocess.CompletedProcess(command, status[0], _text(out), _text(err))


def _captured() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    """What was written, read back as text mode reads a pipe: "\\r\\n" and "\\r" become "\\n"."""
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
