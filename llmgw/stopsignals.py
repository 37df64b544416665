"""SIGINT and SIGTERM held back while a long-running program starts, taken by its loop once it can stop cleanly.

A stop signal that reaches a Python program as it starts lands wherever the
program happens to be. Measured on a loaded 2-core machine, an agent sent
SIGINT in its first second (the CI of 2026-12-07, `build.py run` stopped half
a second after it started the agent):
- during orjson's module set-up, it died of SIGSEGV (exit 139);
- before its loop's handler was in, asyncio's own first-SIGINT handler
  cancelled the starting task, and the agent sometimes went on running,
  the request lost;
- during Python's own start (site), "Fatal Python error", exit 1.

So the programs that stop on a signal (`llmgw server`, `agent`, `mirror
serve`, `sim-engine`) start with both signals blocked: the kernel keeps one
that arrives pending, and delivers it the moment `take` has the loop's
handler in, which stops the program the one orderly way. Every other command
releases them at once. A parent that starts such a program (build.py, the
tests) may start it blocked, which covers the interpreter's own start too.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by every `llmgw` command's start (cli/main.py), so nothing heavy here
    import asyncio

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def hold() -> set[int | signal.Signals]:
    """Block SIGINT and SIGTERM in this thread (and the threads and children it starts) until `release`; the
    signals it had blocked before, for `restore`."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def restore(mask: set[int | signal.Signals]) -> None:
    """This thread's blocked signals as `hold` found them."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def release() -> None:
    """Unblock them; one that arrived meanwhile is delivered now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def take(loop: asyncio.AbstractEventLoop, stop: Callable[[], object],
         signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
    """Have `stop` called on each of `signals` in `loop`, then release them (a pending one calls it at once)."""
    for sig in signals:
        loop.add_signal_handler(sig, stop)
    release()


def taken_by_the_program(run: Callable[..., int]) -> Callable[..., int]:
    """Mark a command's `run` as one that `take`s the signals itself; `llmgw`'s main releases them for the rest."""
    run.takes_stop_signals = True  # type: ignore[attr-defined]
    return run


def taken_by(run: Callable[..., object]) -> bool:
    """Whether `run` was marked by `taken_by_the_program`."""
    return bool(getattr(run, "takes_stop_signals", False))
