"""llmgw's own program as a file: checking an llmgw.pyz, holding releases, the offline bundle, and replacing the
running program with the previous one kept beside it.

Below every package that runs a machine: the control
plane checks and holds a program before an upgrade touches any machine, and
a machine (control plane or node) replaces its own program through swap.py.
What to do when, and in which order, is llmgw.control.upgrade's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face
from llmgw.release.bundle import BUNDLE_SUFFIX, Bundle, open_bundle
from llmgw.release.program import Program, ReleaseError, check_program, running_program, sha256_of
from llmgw.release.releases import Releases
from llmgw.release.selfupgrade import RELEASE_PATH, WHEEL_PATH, fetch_program, fetch_wheels, held_wheels, upgrade_self
from llmgw.release.swap import PREVIOUS_SUFFIX, install_program, previous_of, restore_previous
from llmgw.release.watchdog import confirm, confirmed, start_watchdog, watch

if TYPE_CHECKING:
    from llmgw.release.helper import HELPER_UNITS, Request, apply, can_replace, helper_installed, stage

__all__ = [
    "BUNDLE_SUFFIX", "Bundle", "open_bundle", "Program", "ReleaseError", "check_program", "running_program",
    "sha256_of", "Releases", "PREVIOUS_SUFFIX", "install_program", "previous_of", "restore_previous",
    "RELEASE_PATH", "WHEEL_PATH", "fetch_program", "fetch_wheels", "held_wheels", "upgrade_self",
    "confirm", "confirmed", "start_watchdog", "watch",
    "HELPER_UNITS", "Request", "apply", "can_replace", "helper_installed", "stage",
]

# Names that would load more than the rest of the face, imported from their module when first asked for
# (llmgw/lazyface.py): the upgrade helper's side is wanted by `llmgw ctl upgrade` and the helper alone.
__getattr__ = lazy_face(__name__, {
    "helper": ("HELPER_UNITS", "Request", "apply", "can_replace", "helper_installed", "stage"),
})
