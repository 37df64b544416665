"""Fixtures for the console's tests: real servers, agents and a real terminal (tmux)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.integration.conftest import server, servers  # noqa: F401 - the same real servers
from tests.support.tmux import Terminal, llmgw_terminal

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "var" / "console-screens"


@pytest.fixture(scope="session")
def checkout_python(tmp_path_factory) -> str:
    """An interpreter whose `import llmgw` is this checkout, with no PYTHONPATH needed.

    An agent starts its engines with its own interpreter and a clean
    environment (no PYTHONPATH), so in a worktree beside an editable install
    of another checkout the engine would run that other checkout's code.
    This interpreter (a venv with a .pth naming this checkout first, then
    the running interpreter's packages) makes agent and engine both run
    the code under test.
    """
    venv = tmp_path_factory.mktemp("checkout-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "llmgw-checkout.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    return str(venv / "bin" / "python")


class _Launcher:
    """One terminal of a test, unstarted: `.start(*argv)` runs `llmgw ARGV` in it."""

    def __init__(self, workdir: Path, width: int, height: int) -> None:
        self.workdir, self.width, self.height = workdir, width, height
        self.started: Terminal | None = None

    def start(self, *argv: str, env: dict[str, str] | None = None, cwd: str | None = None) -> Terminal:
        self.started = llmgw_terminal(list(argv), self.workdir, env, cwd, self.width, self.height)
        return self.started


@pytest.fixture
def terminal(tmp_path):
    """A 120×40 tmux terminal of this test's own; its tmux server is ended after the test."""
    made: list[_Launcher] = []

    def make(width: int = 120, height: int = 40) -> _Launcher:
        made.append(_Launcher(tmp_path / "terminals", width, height))
        return made[-1]

    yield make
    for launcher in made:
        if launcher.started is not None:
            launcher.started.close()


@pytest.fixture
def capture():
    """capture(terminal, name): keep the screen as var/console-screens/NAME.txt, pasted into docs/console.md."""
    def keep(t: Terminal, name: str) -> None:
        t.save(Path(os.environ.get("LLMGW_CONSOLE_SCREENS", CAPTURES)) / f"{name}.txt")

    return keep
