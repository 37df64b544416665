"""llmgw's own program as a file: checking an llmgw.pyz, holding releases, the offline bundle, and replacing the
running program with the previous one kept beside it.

Below every package that runs a machine: the control
plane checks and holds a program before an upgrade touches any machine, and
a machine (control plane or node) replaces its own program through swap.py.
What to do when, and in which order, is llmgw.control.upgrade's.
"""

from __future__ import annotations

from llmgw.release.bundle import BUNDLE_SUFFIX, Bundle, open_bundle
from llmgw.release.program import Program, ReleaseError, check_program, running_program, sha256_of
from llmgw.release.releases import Releases
from llmgw.release.selfupgrade import (RELEASE_PATH, WHEEL_PATH, fetch_program, fetch_wheels, held_wheels,
                                       upgrade_self)
from llmgw.release.swap import PREVIOUS_SUFFIX, install_program, previous_of, restore_previous
from llmgw.release.watchdog import confirm, confirmed, start_watchdog, watch

__all__ = [
    "BUNDLE_SUFFIX", "Bundle", "open_bundle", "Program", "ReleaseError", "check_program", "running_program",
    "sha256_of", "Releases", "PREVIOUS_SUFFIX", "install_program", "previous_of", "restore_previous",
    "RELEASE_PATH", "WHEEL_PATH", "fetch_program", "fetch_wheels", "held_wheels", "upgrade_self",
    "confirm", "confirmed", "start_watchdog", "watch",
]
