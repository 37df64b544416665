"""Setting up: a new control plane, a new node, join codes, units, firewall."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.onboard.defaults import LISTEN_DEFAULTS, MIRROR_DIR, MIRROR_LISTEN, STARTERS
    from llmgw.onboard.first_run import FirstWebhook, init_server
    from llmgw.onboard.firstplane import STEP_NAMES, Result, install
    from llmgw.onboard.hainstall import (
        MOST_JUDGE_MACHINES,
        HaJob,
        check_others,
        from_file,
        from_hosts,
        install_ha,
        install_three,
        judges_from_hosts,
    )
    from llmgw.onboard.interfaces import check_interface, interface_toward
    from llmgw.onboard.judge import JUDGE, JUDGES
    from llmgw.onboard.layout import Layout
    from llmgw.onboard.mirroradd import MirrorAdd, add_peer
    from llmgw.onboard.nodeadd import NodeAdd, add_node, program_file
    from llmgw.onboard.parts import PART, PARTS, ChoiceError, Choices, Machine, command, plan
    from llmgw.onboard.peermirror import onboard_mirror
    from llmgw.onboard.serveradd import ServerAdd, add_server, shared_parts
    from llmgw.onboard.services import service_manager
    from llmgw.onboard.ssh import Credentials, Target
    from llmgw.onboard.steps import Progress, StepFailed
    from llmgw.onboard.stopping import Stopped, stop_install
    from llmgw.onboard.supervisor import detach

__all__ = [
    "ChoiceError", "Choices", "Credentials", "FirstWebhook", "HaJob", "LISTEN_DEFAULTS", "Layout", "Machine",
    "MirrorAdd", "NodeAdd", "PART", "PARTS", "Progress", "Result", "STARTERS", "STEP_NAMES", "ServerAdd", "StepFailed",
    "Stopped", "Target", "add_node", "add_peer", "add_server", "check_interface", "check_others", "command",
    "detach", "from_file", "from_hosts", "init_server", "install", "install_ha", "install_three", "judges_from_hosts",
    "interface_toward", "onboard_mirror", "plan", "program_file", "service_manager", "shared_parts", "stop_install",
    "MIRROR_DIR", "MIRROR_LISTEN", "JUDGE", "JUDGES", "MOST_JUDGE_MACHINES",
]

# The face's names, each imported from its module when first asked for (llmgw/lazyface.py): importing
# the package costs nothing, and one name loads only its own module.
__getattr__ = lazy_face(__name__, {
    "defaults": ("LISTEN_DEFAULTS", "MIRROR_DIR", "MIRROR_LISTEN", "STARTERS"),
    "first_run": ("FirstWebhook", "init_server"),
    "firstplane": ("Result", "STEP_NAMES", "install"),
    "hainstall": ("HaJob", "MOST_JUDGE_MACHINES", "check_others", "from_file", "from_hosts", "install_ha",
                  "install_three", "judges_from_hosts"),
    "interfaces": ("check_interface", "interface_toward"),
    "judge": ("JUDGE", "JUDGES"),
    "layout": ("Layout",),
    "mirroradd": ("MirrorAdd", "add_peer"),
    "nodeadd": ("NodeAdd", "add_node", "program_file"),
    "peermirror": ("onboard_mirror",),
    "parts": ("ChoiceError", "Choices", "Machine", "PART", "PARTS", "command", "plan"),
    "serveradd": ("ServerAdd", "add_server", "shared_parts"),
    "services": ("service_manager",),
    "ssh": ("Credentials", "Target"),
    "steps": ("Progress", "StepFailed"),
    "stopping": ("Stopped", "stop_install"),
    "supervisor": ("detach",),
})
