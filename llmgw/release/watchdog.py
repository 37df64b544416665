"""The watchdog that keeps a machine up through its own upgrade.

Before a machine exits to restart into a new program, the old program
starts a detached watchdog of its own (old, known-good code: it runs from
llmgw.previous). The new program, once it serves (a control plane) or is
connected (a node), writes DATA/upgrade-confirmed naming its version. A
watchdog that has not read that within its bound puts llmgw.previous back
and has the machine's service manager restart it: a build that does not
start, or starts and never serves, does not leave the machine down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from llmgw.release.swap import restore_previous

CONFIRMED = "upgrade-confirmed"
WATCHDOG_LOG = "upgrade-watchdog.log"
POLL_S = 0.5


def confirm(data_dir: str | os.PathLike[str], version: str) -> None:
    """Say that this program, at `version`, is up: what a watchdog waits for. Written at every start."""
    path = Path(data_dir) / CONFIRMED
    partial = path.with_name(CONFIRMED + ".partial")
    partial.write_text(json.dumps({"version": version, "at": time.time(), "pid": os.getpid()}))
    os.replace(partial, path)


def confirmed(data_dir: str | os.PathLike[str], version: str, since: float) -> bool:
    try:
        doc = json.loads((Path(data_dir) / CONFIRMED).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("version") == version and float(doc.get("at", 0)) >= since


def start_watchdog(previous: Path, target: Path, version: str, data_dir: str, within: float,
                   extra: list[str] | None = None) -> int:
    """Start `llmgw upgrade-watchdog` from the previous program, in a session of its own; its pid.

    A session of its own so that the service manager stopping this machine's
    process group leaves it running (the units' KillMode, docs/upgrade.md).
    Its output goes to DATA/upgrade-watchdog.log."""
    argv = [sys.executable, "-I", str(previous), "upgrade-watchdog", "--program", str(target), "--version", version,
            "--data-dir", data_dir, "--within", f"{within:g}", "--since", f"{time.time():.3f}", *(extra or [])]
    with open(Path(data_dir) / WATCHDOG_LOG, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    return proc.pid


def watch(target: Path, version: str, data_dir: str, within: float, since: float,
          restart: Callable[[], None] | None, say: Callable[[str], None]) -> bool:
    """Wait for `version` to confirm; past `within` put the previous program back and restart. True: confirmed."""
    deadline = since + within
    while time.time() < deadline:
        if confirmed(data_dir, version, since):
            say(f"llmgw {version} confirmed it is up; the watchdog is done")
            return True
        time.sleep(POLL_S)
    if confirmed(data_dir, version, since):
        return True
    if not restore_previous(target):
        say(f"llmgw {version} did not confirm it is up within {within:g} s, and there is no "
            f"{target.name}.previous to put back; start the machine's service by hand")
        return False
    say(f"llmgw {version} did not confirm it is up within {within:g} s: the previous program is back in "
        f"{target}" + ("; restarting the service" if restart else "; its service manager starts it"))
    if restart is not None:
        restart()
    return False
