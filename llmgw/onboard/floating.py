"""The floating address on a control plane of three: keepalived's configuration written, keepalived started.

What `llmgw server add --vip` writes by hand on each control plane, done by
the three-machine install on each of the three (docs/ha.md): the same
address and VRRP router id everywhere, each machine's own interface and
`/leader`. keepalived is a service of the machine itself: on the machine
it is installed (with curl, which asks `/leader`) and started, or
restarted when the file changed; an install into a directory writes the
file under its root and starts nothing, since keepalived there would move
addresses on the machine that runs the test.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from llmgw.config import Address
from llmgw.onboard import debian, keepalived
from llmgw.onboard.interfaces import check_interface, interface_toward
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import VENDOR_UNITS, service_manager
from llmgw.onboard.steps import Progress, StepFailed

STEP = "the floating address"
UNIT = "keepalived.service"
PACKAGES = ("keepalived", "curl")


def setup(layout: Layout, vip_text: str, interface: str | None, client_listen: str, services: str | None,
          machine: str, say: Callable[[Progress], None]) -> None:
    try:
        vip = keepalived.parse_vip(vip_text)
        device = check_interface(interface) if interface else interface_toward(vip)
        if layout.real:
            debian.install(layout, machine, PACKAGES, say)
            curl = keepalived.find_curl()
        else:
            curl = shutil.which("curl") or "/usr/bin/curl"
        address = keepalived.FloatingAddress(vip=vip, interface=device,
                                             check_url=keepalived.leader_url(Address.parse(client_listen)))
        text = keepalived.render(address, curl)
        path = layout.at(keepalived.DEFAULT_PATH)
        changed = not (path.is_file() and path.read_text() == text)
        if changed:
            keepalived.write(str(path), text)
    except keepalived.FloatingAddressError as e:
        raise StepFailed(STEP, f"{STEP}: {e}") from None
    state = "done" if changed else "unchanged"
    held = f"{vip} on {device}, VRRP router id {address.router_id}, held while {address.check_url} answers"
    if not layout.real:
        say(Progress(machine, STEP, state, f"{held}; written to {path} (keepalived runs on the machine itself, "
                                           f"not under {layout.root})"))
        return
    manager = service_manager(layout, services, sources=VENDOR_UNITS)
    if manager.kind == "supervised":
        manager.install(UNIT)  # a copy of Debian's unit, as for etcd's and Patroni's
    if not manager.status(UNIT).active:
        manager.start(UNIT)
        state = "done"
    elif changed:
        manager.restart(UNIT)
    say(Progress(machine, STEP, state, f"{held}; keepalived running"))
