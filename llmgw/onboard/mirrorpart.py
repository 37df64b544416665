"""The model mirror's part of an install: mirror.yaml, its folder and llmgw-mirror.service on one machine.

The first control plane's install (firstplane) runs it on its own machine;
with three machines the second runs it too, as part of its standby install
(standby), each naming the other as its peer. The mirror serves with the
certificate its machine's control plane writes under the data directory
(tls/agent-port.crt and tls/ca.crt), which is why it goes where a control
plane is and is started after it.

Each piece looks before it acts, so a second run changes nothing.
"""

from __future__ import annotations

import shutil
import socket
import time
from typing import Any

import yaml

from llmgw.files import write_atomic
from llmgw.onboard.defaults import MIRROR_LISTEN
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import ServiceManager
from llmgw.onboard.steps import StepFailed

MIRROR_UNIT = "llmgw-mirror.service"
STEP = "the model mirror"
# The mirror loads holdings.json and binds its port in well under a second; a
# slow disk with many files held was measured at a few seconds.
LISTEN_WAIT_S = 30.0
# TEST-NET-1 (RFC 5737): a UDP socket's connect() there sends nothing and gives
# the address of the default route, the one other machines most likely reach.
_ROUTE_PROBE = "192.0.2.1"


def own_address() -> str:
    """This machine's address on its default route; loopback where it has none (an isolated machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((_ROUTE_PROBE, 9))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def url_for(listen: str, address: str = "") -> str:
    """The address nodes and control planes reach a mirror listening at `listen` on: its own host when it
    listens on one, else `address` (the machine's, as the others reach it), else this machine's own."""
    from llmgw.config import Address

    where = Address(listen)
    host = where.host if where.host not in ("", "0.0.0.0", "::") else (address or own_address())  # noqa: S104
    return f"https://[{host}]:{where.port}" if ":" in host else f"https://{host}:{where.port}"


def mirror_yaml(layout: Layout, folder: str, listen: str, peers: list[str]) -> dict[str, Any]:
    """mirror.yaml as setup writes it: the keys it chooses, everything else the defaults (docs/reference.md)."""
    doc: dict[str, Any] = {"dir": str(layout.at(folder)), "data_dir": str(layout.server_data)}
    if listen != MIRROR_LISTEN:
        doc["listen"] = listen
    if peers:
        doc["peers"] = list(peers)
    return doc


def write_config(layout: Layout, doc: dict[str, Any]) -> tuple[bool, str]:
    """mirror.yaml with setup's keys over whatever else a person wrote there; unchanged when it says so already."""
    from llmgw.config import ConfigError, MirrorConfig, from_dict

    path = layout.mirror_config
    try:
        before = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        before = {}
    if not isinstance(before, dict):
        raise StepFailed(STEP, f"{STEP}: {path} is not a YAML mapping; fix or remove it, then run again")
    merged = {**before, **doc}
    if path.exists() and merged == before:
        return False, f"{path} is as chosen"
    try:
        from_dict(MirrorConfig, merged)
    except ConfigError as e:
        raise StepFailed(STEP, f"{STEP}: mirror.yaml: {e}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ("# Written by llmgw setup; keys: docs/reference.md\n"
                        + yaml.safe_dump(merged, sort_keys=False, default_flow_style=False)).encode(), 0o640)
    if layout.real:
        shutil.chown(path, "root", "llmgw")
    return True, f"wrote {path}"


def make_folder(layout: Layout, folder: str) -> bool:
    """The folder the files go in, the llmgw user's (the unit's User=). True when it was made."""
    path = layout.at(folder)
    if path.is_dir():
        return False
    try:
        path.mkdir(parents=True, mode=0o750)
    except OSError as e:
        raise StepFailed(STEP, f"{STEP}: {path} cannot be made ({e.strerror}); make it by hand, owned by "
                               "llmgw, or choose another folder") from None
    if layout.real:
        shutil.chown(path, "llmgw", "llmgw")
    return True


def start(manager: ServiceManager, changed: bool) -> tuple[bool, str]:
    """llmgw-mirror.service installed and running; restarted when its unit or its mirror.yaml changed."""
    changed = manager.install(MIRROR_UNIT) or changed
    before = manager.status(MIRROR_UNIT)
    if before.active and changed:
        manager.restart(MIRROR_UNIT)
    elif not before.active:
        manager.start(MIRROR_UNIT)
    else:
        return False, f"{MIRROR_UNIT} running"
    return True, f"{MIRROR_UNIT} started ({manager.kind})"


def wait_listening(address: str, seconds: float = LISTEN_WAIT_S) -> None:
    """Until the mirror takes connections at `address` (HOST:PORT). Only the port: every call it answers
    needs a certificate of the cluster's, which an install does not hold."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise StepFailed(STEP, f"{STEP}: nothing took connections at {address} in {seconds:.0f} s; "
                                       f"see {MIRROR_UNIT}'s log (journalctl -u {MIRROR_UNIT})") from None
            time.sleep(0.25)


def install(layout: Layout, manager: ServiceManager, folder: str, listen: str, peers: list[str]) -> tuple[bool, str]:
    """The whole part on this machine: (whether anything changed, what was done)."""
    wrote, said = write_config(layout, mirror_yaml(layout, folder, listen, peers))
    made = make_folder(layout, folder)
    started, running = start(manager, wrote)
    changed = wrote or made or started
    where = layout.at(folder)
    if not changed:
        return False, f"running; files kept in {where}"
    return True, "; ".join(filter(None, [said if wrote else "", f"made {where}" if made else "", running]))
