"""A real terminal for the console's tests: a detached tmux session of a fixed size, on a server of its own.

Each Terminal runs its own tmux server (`tmux -L NAME`, a socket no other
test or person uses), so ending it with kill-server ends only what this
test started. Keys go in with send-keys; what a person would see comes
back from capture-pane; a test waits on text appearing, never on time.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.waiting import wait_until


class Terminal:
    def __init__(self, width: int = 120, height: int = 40) -> None:
        self.socket = f"llmgw-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height
        self.started = False

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20)

    def start(self, *argv: str, env: dict[str, str] | None = None, cwd: str | None = None) -> Terminal:
        """Run `python -m llmgw ARGV` in the session (with this checkout first on PYTHONPATH)."""
        environment = {**os.environ, **(env or {}), "TERM": "xterm-256color"}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment.items()
                           if k in ("PYTHONPATH", "PATH", "HOME", "LANG", "LC_ALL", "TERM") or k.startswith("LLMGW"))
        command = f"env -i {exports} {shlex.quote(sys.executable)} -m llmgw {shlex.join(argv)}; " \
                  "echo; echo \"[exited $?]\"; sleep 600"
        done = self.tmux("new-session", "-d", "-x", str(self.width), "-y", str(self.height),
                         "-c", cwd or os.getcwd(), command)
        assert done.returncode == 0, done.stderr
        self.started = True
        return self

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p").stdout

    def keys(self, *keys: str) -> None:
        """tmux key names (Enter, Tab, Escape, Down, F2) or literal text, each as its own send-keys."""
        for key in keys:
            self.tmux("send-keys", key)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-l", text)

    def wait_for(self, *texts: str, timeout: float = 30) -> str:
        """Wait until every text is on the screen at once; the screen then. Fails showing the last screen."""
        def shown() -> str:
            screen = self.screen()
            return screen if all(t in screen for t in texts) else ""

        try:
            return wait_until(shown, timeout, f"the screen showing {texts!r}", interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- the screen ---\n{self.screen()}") from None

    def wait_gone(self, text: str, timeout: float = 30) -> str:
        """Wait until `text` is no longer on the screen (a box closed); the screen then."""
        return wait_until(lambda: (lambda screen: screen if text not in screen else "")(self.screen()), timeout,
                          f"{text!r} gone from the screen", interval=0.2)

    def save(self, path: Path) -> None:
        """The screen as text, for docs/console.md."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(line.rstrip() for line in self.screen().splitlines()).rstrip() + "\n")

    def close(self) -> None:
        if self.started:
            self.tmux("kill-server")
            self.started = False
