"""Debian's packages an install needs, installed with apt-get where missing: on the machine itself only.

The three-machine store needs etcd, Patroni and PostgreSQL; the floating
address needs keepalived and curl. A test's install into a directory never
installs a package: the packages are the machine's, whatever the root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

from llmgw.onboard.layout import Layout
from llmgw.onboard.steps import Progress, StepFailed

STEP = "Debian's packages"


def missing(packages: Sequence[str]) -> list[str]:
    """Of `packages`, those dpkg does not have installed."""
    out = []
    for package in packages:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True)
        if done.returncode != 0 or "install ok installed" not in done.stdout:
            out.append(package)
    return out


def install(layout: Layout, machine: str, packages: Sequence[str], say: Callable[[Progress], None],
            before: Callable[[], None] = lambda: None) -> None:
    """apt-get install those of `packages` that are missing; `before` runs first when any is (a file the
    package's scripts read, such as createcluster.conf). StepFailed when they cannot be installed."""
    if not layout.real:
        raise StepFailed(STEP, f"packages are installed on the machine itself, not under {layout.root}")
    wanted = missing(packages)
    if not wanted:
        say(Progress(machine, STEP, "unchanged"))
        return
    if shutil.which("apt-get") is None:
        raise StepFailed(STEP, f"{', '.join(wanted)} are missing and there is no apt-get here; this needs "
                               "Debian 12 or a machine with those packages installed")
    say(Progress(machine, STEP, "doing", "installing " + ", ".join(wanted)))
    before()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *wanted],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise StepFailed(STEP, f"apt-get could not install {', '.join(wanted)} ({last}); run apt-get update, "
                               "or reach a Debian mirror, then run this again")
    say(Progress(machine, STEP, "done", ", ".join(wanted)))
