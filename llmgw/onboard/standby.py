"""The machine's half of `llmgw server add --ssh`: `llmgw onboard server`, run as root on the new standby.

A standby is one more control plane on the same PostgreSQL store, with the
cluster's master key (which unseals the cluster CA's key and every secret in
the store). The SSH side sends both on stdin; they are written to
server.yaml (0640) and DATA/master-key (0600), never onto a command line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmgw.files import write_atomic
from llmgw.onboard import floating
from llmgw.onboard.defaults import MIRROR_DIR, MIRROR_LISTEN
from llmgw.onboard.layout import Layout
from llmgw.onboard.machine import USER, Report, run_steps, start_unit, user_and_directories
from llmgw.onboard.parts import LISTEN_DEFAULTS
from llmgw.onboard.services import ServiceManager, install_server_units, service_manager
from llmgw.onboard.steps import Progress, StepFailed, read_plan

SERVER_UNIT = "llmgw-server.service"
STEP_CONFIG = "write server.yaml"
STEP_KEY = "put the master key in place"


@dataclass(frozen=True)
class ServerPlan:
    machine: str
    store: str = field(repr=False)  # may hold the store's password
    master_key: str = field(repr=False)  # base64
    name: str | None = None
    listen: dict[str, str] = field(default_factory=dict)
    advertise: str = ""
    services: str | None = None
    program_changed: bool = False  # a new program was copied: a running server is restarted to run it
    vip: str = ""  # ADDR/LEN: keepalived's floating address, written and started on this machine
    vip_interface: str | None = None
    # The model mirror, on the second of three machines: {"dir", "listen", "peers"} (the first's mirror).
    mirror: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> ServerPlan:
        return read_plan(cls, text, "llmgw server add --ssh")


def _own(layout: Layout, path: Path) -> None:
    """The server runs as llmgw (User= in its unit): on a real machine its files are that user's."""
    if layout.real:
        shutil.chown(path, USER, USER)


def write_server_config(layout: Layout, plan: ServerPlan) -> tuple[bool, str]:
    from llmgw.config import ConfigError, ServerConfig, from_dict

    path = layout.server_config
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        doc = {}
    if not isinstance(doc, dict):
        raise StepFailed(STEP_CONFIG, f"{STEP_CONFIG}: {path} is not a YAML mapping; fix or remove it, then run again")
    merged = {**doc, "store": plan.store, "data_dir": str(layout.server_data)}
    if plan.name:
        merged["name"] = plan.name
    if plan.advertise:
        merged["advertise"] = plan.advertise
    if plan.listen:
        merged["listen"] = {**(doc.get("listen") or {}), **plan.listen}
    if path.exists() and merged == doc:
        return False, str(path)
    try:
        from_dict(ServerConfig, merged)
    except ConfigError as e:
        raise StepFailed(STEP_CONFIG, f"{STEP_CONFIG}: {e}") from None
    text = ("# Written by llmgw server add --ssh; other keys: docs/reference.md#serveryaml\n"
            + yaml.safe_dump(merged, sort_keys=False, default_flow_style=False))
    write_atomic(path, text.encode(), 0o640)
    if layout.real:
        shutil.chown(path, "root", USER)
    return True, str(path)


def put_master_key(layout: Layout, plan: ServerPlan) -> tuple[bool, str]:
    from llmgw.config import MASTER_KEY_FILE

    key = base64.b64decode(plan.master_key)
    path = layout.server_data / MASTER_KEY_FILE
    if path.exists():
        if path.read_bytes() == key:
            return False, str(path)
        raise StepFailed(STEP_KEY, f"{STEP_KEY}: {path} holds another master key (another cluster's?); move it "
                                   "away if this machine is to join this cluster, then run again")
    write_atomic(path, key, 0o600)
    _own(layout, path)
    return True, str(path)


def install_server(layout: Layout, plan: ServerPlan, report: Report) -> dict[str, Any]:
    def directories() -> tuple[bool, str]:
        did, said = user_and_directories(layout)
        if not layout.server_data.is_dir():
            layout.server_data.mkdir(parents=True, mode=0o750)
            _own(layout, layout.server_data)
            did, said = True, ", ".join(filter(None, [said, str(layout.server_data)]))
        return did, said

    manager = service_manager(layout, plan.services)
    run_steps(plan.machine, report, [
        ("make the llmgw user and directories", directories),
        (STEP_CONFIG, lambda: write_server_config(layout, plan)),
        (STEP_KEY, lambda: put_master_key(layout, plan)),
        ("install the service", lambda: (install_server_units(manager, SERVER_UNIT),
                                         f"{SERVER_UNIT} ({manager.kind})")),
    ], start_unit(manager, SERVER_UNIT), changed=plan.program_changed)
    if plan.mirror:
        install_mirror(layout, manager, plan, report)
    if plan.vip:
        floating.setup(layout, plan.vip, plan.vip_interface, plan.listen.get("client") or LISTEN_DEFAULTS["client"],
                       plan.services, plan.machine, report)
    return {"name": plan.name or os.uname().nodename}


def install_mirror(layout: Layout, manager: ServiceManager, plan: ServerPlan, report: Report) -> None:
    """The model mirror beside the standby, after it: it serves with the certificate the standby writes."""
    from llmgw.onboard import mirrorpart
    from llmgw.onboard.firstplane import dial

    listen = plan.mirror.get("listen") or MIRROR_LISTEN
    report(Progress(plan.machine, mirrorpart.STEP, "doing"))
    changed, said = mirrorpart.install(layout, manager, plan.mirror.get("dir") or MIRROR_DIR, listen,
                                       list(plan.mirror.get("peers") or []))
    mirrorpart.wait_listening(dial(listen))
    report(Progress(plan.machine, mirrorpart.STEP, "done" if changed else "unchanged", said))


def run(layout: Layout, stdin: str) -> int:
    def report(progress: Progress) -> None:
        print(progress.line(), flush=True)

    machine = "this machine"
    try:
        plan = ServerPlan.from_json(stdin)
        machine = plan.machine
        server = install_server(layout, plan, report)
    except StepFailed as failed:
        report(failed.progress(machine))
        return 1
    print(json.dumps({"server": server}), flush=True)
    return 0


def main(root: str) -> int:
    return run(Layout(Path(root)), sys.stdin.readline())

