"""The machine's half of `llmgw mirror add-peer`: a model mirror on a machine of its own, run there as root.

Two commands, each with its plan on stdin and Progress lines on stdout, as `llmgw onboard node`:

- `llmgw onboard mirror-key`: the llmgw user and directories, and the mirror's private key under DATA/tls (made
  once, 0600, never sent anywhere); it ends with {"mirror-key": {"csr", "certificate", "hosts"}}: a request for
  that key, the certificate already there (so the SSH side signs a new one only when it must), and the machine's
  names and addresses for the certificate to name.
- `llmgw onboard mirror`: the certificate and the CA's written beside the key (0644), mirror.yaml naming them and
  the first mirror as its peer, the mirror's folder, llmgw-mirror.service installed and started (restarted when
  any of that changed), and its port taking connections.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmgw.files import write_atomic
from llmgw.onboard import mirrorpart
from llmgw.onboard.defaults import MIRROR_DIR, MIRROR_LISTEN
from llmgw.onboard.layout import Layout
from llmgw.onboard.machine import USER, Report, run_steps, start_unit, user_and_directories
from llmgw.onboard.services import service_manager
from llmgw.onboard.steps import Progress, StepFailed, read_plan
from llmgw.trust import machine_hosts

CERT_FILE = "mirror.crt"
KEY_FILE = "mirror.key"
CA_FILE = "ca.crt"

STEP_USER = "make the llmgw user and directories"
STEP_KEY = "make the mirror's key"
STEP_CERT = "write the certificate"
STEP_CONFIG = "write mirror.yaml"
STEP_FOLDER = "make the mirror's folder"
STEP_INSTALL = "install the service"


@dataclass(frozen=True)
class KeyPlan:
    machine: str
    name: str

    @classmethod
    def from_json(cls, text: str) -> KeyPlan:
        return read_plan(cls, text, "llmgw mirror add-peer")


@dataclass(frozen=True)
class MirrorPlan:
    machine: str
    certificate: str = field(repr=False)
    ca: str = field(repr=False)
    peers: list[str] = field(default_factory=list)  # the mirror this one keeps in step with
    listen: str = MIRROR_LISTEN
    dir: str = MIRROR_DIR
    hub_endpoint: str = ""  # the first mirror's, when it is not Hugging Face's own
    services: str | None = None
    program_changed: bool = False

    @classmethod
    def from_json(cls, text: str) -> MirrorPlan:
        return read_plan(cls, text, "llmgw mirror add-peer")


def tls_files(layout: Layout) -> dict[str, str]:
    """mirror.yaml's `tls` on this machine: the files under DATA/tls."""
    tls = layout.server_data / "tls"
    return {"cert_file": str(tls / CERT_FILE), "key_file": str(tls / KEY_FILE), "ca_file": str(tls / CA_FILE)}


def _own(layout: Layout, path: Path) -> None:
    """The mirror runs as llmgw (User= in its unit): on a real machine its key and folders are that user's."""
    if layout.real:
        shutil.chown(path, USER, USER)


def directories(layout: Layout) -> tuple[bool, str]:
    did, said = user_and_directories(layout)
    made = [said] if said else []
    for path in (layout.server_data, layout.server_data / "tls"):
        if not path.is_dir():
            path.mkdir(parents=True, mode=0o750)
            _own(layout, path)
            did = True
            made.append(str(path))
    return did, ", ".join(made)


def own_hosts() -> list[str]:
    """The names and addresses of this machine, for its mirror's certificate: loopback (where `llmgw mirror` dials
    it), its host names, and every address other machines may reach it at."""
    return machine_hosts()


def make_key(layout: Layout, plan: KeyPlan) -> tuple[tuple[bool, str], dict[str, Any]]:
    """The mirror's key, made here once; a CSR for it and the certificate already beside it, if any."""
    from llmgw.trust import mirror_key

    files = tls_files(layout)
    key_path, cert_path = Path(files["key_file"]), Path(files["cert_file"])
    made, csr = mirror_key(key_path, plan.name, lambda path: _own(layout, path))
    done = (True, f"{key_path}; it never leaves this machine") if made else (False, str(key_path))
    certificate = cert_path.read_text() if cert_path.exists() else ""
    return done, {"csr": csr, "certificate": certificate, "hosts": own_hosts()}


def write_certificate(layout: Layout, plan: MirrorPlan) -> tuple[bool, str]:
    files = tls_files(layout)
    wrote = []
    for path, text in ((Path(files["cert_file"]), plan.certificate), (Path(files["ca_file"]), plan.ca)):
        if path.exists() and path.read_text() == text:
            continue
        write_atomic(path, text.encode(), 0o644)
        _own(layout, path)
        wrote.append(str(path))
    return (True, ", ".join(wrote)) if wrote else (False, files["cert_file"])


def mirror_doc(layout: Layout, plan: MirrorPlan) -> dict[str, Any]:
    """mirror.yaml's keys add-peer owns; a peer named there before is kept beside the one added."""
    try:
        before = yaml.safe_load(layout.mirror_config.read_text()) or {}
    except FileNotFoundError:
        before = {}
    known = before.get("peers") if isinstance(before, dict) else None
    peers = [str(p).rstrip("/") for p in known] if isinstance(known, list) else []
    doc = mirrorpart.mirror_yaml(layout, plan.dir, plan.listen, list(dict.fromkeys([*peers, *plan.peers])))
    doc["tls"] = tls_files(layout)
    if plan.hub_endpoint:
        doc["hub_endpoint"] = plan.hub_endpoint
    return doc


def key_steps(layout: Layout, plan: KeyPlan, report: Report) -> dict[str, Any]:
    answer: dict[str, Any] = {}

    def key() -> tuple[bool, str]:
        done, found = make_key(layout, plan)
        answer.update(found)
        return done

    run_steps(plan.machine, report, [(STEP_USER, lambda: directories(layout)), (STEP_KEY, key)], start=None)
    return answer


def install(layout: Layout, plan: MirrorPlan, report: Report) -> dict[str, Any]:
    from llmgw.onboard.firstplane import dial

    manager = service_manager(layout, plan.services)
    run_steps(plan.machine, report, [
        (STEP_CERT, lambda: write_certificate(layout, plan)),
        (STEP_CONFIG, lambda: mirrorpart.write_config(layout, mirror_doc(layout, plan))),
        (STEP_FOLDER, lambda: (mirrorpart.make_folder(layout, plan.dir), str(layout.at(plan.dir)))),
        (STEP_INSTALL, lambda: (manager.install(mirrorpart.MIRROR_UNIT),
                                f"{mirrorpart.MIRROR_UNIT} ({manager.kind})")),
    ], start_unit(manager, mirrorpart.MIRROR_UNIT), changed=plan.program_changed)
    mirrorpart.wait_listening(dial(plan.listen))
    return {"config": str(layout.mirror_config), "dir": str(layout.at(plan.dir))}


def _run(layout: Layout, stdin: str, command: str) -> int:
    def report(progress: Progress) -> None:
        print(progress.line(), flush=True)

    machine = "this machine"
    try:
        if command == "mirror-key":
            key_plan = KeyPlan.from_json(stdin)
            machine = key_plan.machine
            answer = key_steps(layout, key_plan, report)
        else:
            plan = MirrorPlan.from_json(stdin)
            machine = plan.machine
            answer = install(layout, plan, report)
    except StepFailed as failed:
        report(failed.progress(machine))
        return 1
    print(json.dumps({command: answer}), flush=True)
    return 0


def onboard_mirror(root: str, command: str) -> int:
    """`llmgw onboard mirror-key` and `llmgw onboard mirror`: the plan on stdin, Progress lines on stdout."""
    return _run(Layout(Path(root)), sys.stdin.readline(), command)
