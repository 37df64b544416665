"""A program on a terminal of its own: a detached tmux session on a private server, driven as a person would.

Each Terminal starts its own tmux server (`-L` with a name of its own), of a
fixed size, so what capture-pane returns is the same on every machine, and
ending that server ends only what this test started. Keys go in with
send-keys and the screen comes back as text. Waiting is on what the screen
shows (wait_for), never on the clock. `llmgw_terminal` is the usual way in:
`python -m llmgw ARGV` from this checkout with only the environment it needs.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.waiting import wait_until

WIDTH, HEIGHT = 120, 40
EXITED = "[the program ended with exit status"
# What a program in the terminal is given of the test's environment (tmux gives the pane its server's).
PASSED_ON = ("PYTHONPATH", "PATH", "HOME", "LANG", "LC_ALL")


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, workdir: Path,
                 width: int = WIDTH, height: int = HEIGHT):
        self.socket = f"llmgw-test-{uuid.uuid4().hex[:12]}"
        # Set before the pane exists (a configuration the server reads at its start), so a program that
        # ends at once still leaves its last screen and its exit status to read; no user's ~/.tmux.conf.
        workdir.mkdir(parents=True, exist_ok=True)
        conf = workdir / f"tmux-{self.socket}.conf"
        conf.write_text("set-option -g remain-on-exit on\n")
        # The exit status is written on the screen by the shell around the program: tmux's own
        # #{pane_dead_status} came back empty now and then while the pane was already dead.
        command = (" ".join(shlex.quote(a) for a in argv)
                   + f'; echo "{EXITED} $?"')
        # Only what the program needs: tmux gives the pane the server's
        # environment, and the server is started here with this one.
        self._tmux("-f", str(conf), "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), command,
                   env={**env, "TERM": "xterm-256color"}, cwd=cwd)
        self.server_pid = int(self._tmux("display-message", "-p", "#{pid}").strip())

    def _tmux(self, *args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              env=env or os.environ, cwd=cwd, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout

    def keys(self, *keys: str) -> None:
        """tmux key names (Enter, Tab, Escape, Down, F2) or literal text, each as its own send-keys."""
        for key in keys:
            self._tmux("send-keys", "-t", "t", key)

    def type(self, text: str) -> None:
        """Text as typed, never read as a key name."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def screen(self, scrollback: bool = False) -> str:
        """What the terminal shows; with scrollback, the lines scrolled off its top too (a program's last
        words after it leaves the full-screen view can land there)."""
        return self._tmux("capture-pane", "-p", "-t", "t", *(["-S", "-"] if scrollback else []))

    def highlighted(self) -> list[str]:
        """The text the terminal shows in reverse video (a focused row, a button under the cursor), one item per
        line that has any, top to bottom: what a person sees as where they are, which the plain screen loses."""
        shown = self._tmux("capture-pane", "-p", "-e", "-t", "t")
        found: list[str] = []
        reverse = False  # an attribute set on one line holds on the next until reset
        for line in shown.splitlines():
            run = []
            for text, params in _SGR.findall(line):
                if params or text == "":
                    reverse = _reverse_after(reverse, params)
                if reverse:
                    run.append(text)
            if "".join(run).strip():
                found.append("".join(run).strip())
        return found

    def wait_for(self, *texts: str, timeout: float = 30) -> str:
        """The screen once it shows every one of `texts` at once, and shows the same at the next look: a
        capture taken while the program is still drawing has the top of a screen and not yet its bottom
        (a test under load read an end screen's heading, then an API key cut short). Fails showing the
        last screen."""
        last = [""]

        def showing() -> str:
            before, last[0] = last[0], self.screen()
            return last[0] if all(t in last[0] for t in texts) and last[0] == before else ""
        try:
            return wait_until(showing, timeout, f"the terminal showed {texts!r}", interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen was:\n{last[0]}") from None

    def wait_gone(self, text: str, timeout: float = 30) -> str:
        """The screen once `text` is no longer on it (a box closed)."""
        return wait_until(lambda: (lambda screen: screen if text not in screen else "")(self.screen()), timeout,
                          f"{text!r} gone from the screen", interval=0.2)

    def save(self, path: Path) -> None:
        """The screen as text, for the docs' captured screens."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(line.rstrip() for line in self.screen().splitlines()).rstrip() + "\n")

    def exit_status(self) -> int | None:
        """The program's exit status once it has ended, else None."""
        for line in self.screen(scrollback=True).splitlines():
            if line.startswith(EXITED):
                return int(line[len(EXITED):].strip())
        return None

    def wait_until_exit(self, timeout: float = 30) -> int:
        """The program's exit status, once it has ended."""
        return wait_until(lambda: (s := self.exit_status()) is not None and [s], timeout,
                          "the program in the terminal ended")[0]

    def close(self) -> None:
        """End this terminal's tmux server (and the program in it, which gets SIGHUP) by its PID."""
        try:
            os.kill(self.server_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


# A run of text, or one SGR sequence (ESC [ params m) captured as its parameters; other sequences (tmux emits
# few in a capture) are left as text.
_SGR = re.compile(r"([^\x1b]+)|\x1b\[([0-9;:]*)m")


def _reverse_after(reverse: bool, params: str) -> bool:
    """Whether reverse video is on after the SGR sequence with `params`: 7 sets it, 27 and 0 (or none) reset it;
    a colour's own numbers (38;5;7 is colour 7, not reverse) are skipped."""
    values = [int(v) if v.isdigit() else 0 for v in re.split("[;:]", params)] if params else [0]
    i = 0
    while i < len(values):
        value = values[i]
        if value in (38, 48, 58):
            i += 3 if values[i + 1:i + 2] == [5] else 5
            continue
        if value == 7:
            reverse = True
        elif value in (0, 27):
            reverse = False
        i += 1
    return reverse


def llmgw_terminal(argv: list[str], workdir: Path, env: dict[str, str] | None = None, cwd: str | None = None,
                   width: int = WIDTH, height: int = HEIGHT) -> Terminal:
    """`python -m llmgw ARGV` in a terminal: the test's PYTHONPATH, PATH, HOME, locale and LLMGW_* passed on,
    with `env` over them."""
    environment = {k: v for k, v in os.environ.items() if k in PASSED_ON or k.startswith("LLMGW")}
    environment.setdefault("LANG", "C.UTF-8")
    environment.update(env or {})
    return Terminal([sys.executable, "-m", "llmgw", *argv], environment, cwd or os.getcwd(), workdir, width, height)
