"""`llmgw node add --ssh`: install a node from the control plane, over SSH.

On this side: log in, check the machine's Python against the archive, copy
the archive (skipped when the same sha256 is there), make a join code if
the node has none, run the archive's own `llmgw onboard node` there as root
(onboard/machine.py does the machine's steps and reports each as a JSON
line), then wait until the node reports to the leader. Every step is
reported as Progress, can run again, and fails with StepFailed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llmgw.onboard.layout import Layout
from llmgw.onboard.machine import NodePlan
from llmgw.onboard.ssh import STEP_LOGIN, Credentials, Session, Target, connect
from llmgw.onboard.steps import Progress, StepFailed

STEP_CHECK = "check the machine"
STEP_COPY = "copy the program"
STEP_RUN = "run the install there"
STEP_WAIT = "wait for the node to report"

# Run there as root with `python3 -c`: what the machine has, before anything is copied.
PROBE = r"""
import hashlib, json, os, platform, sys
root = sys.argv[1]
def at(path):
    return path if root == "/" else os.path.join(root, path.lstrip("/"))
program = at("/usr/local/bin/llmgw")
digest = None
if os.path.isfile(program):
    h = hashlib.sha256()
    with open(program, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "implementation": sys.implementation.name,
                  "machine": platform.machine(), "system": platform.system(), "program_sha256": digest,
                  "joined": os.path.exists(at("/var/lib/llmgw-agent/node.crt"))}))
"""


class Admin(Protocol):
    def call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any: ...


@dataclass
class NodeAdd:
    target: Target
    credentials: Credentials
    known_hosts: Path
    program: Path
    root: str = "/"
    services: str | None = None
    name: str | None = None
    control_planes: list[str] | None = None
    wait: float = 120.0
    labels: dict[str, str] = field(default_factory=dict)


def program_file(given: str | None) -> Path:
    """The archive to copy: --program, else the llmgw.pyz this runs from; a sentence from a checkout."""
    chosen = given or os.environ.get("LLMGW_PYZ")
    if not chosen:
        raise StepFailed(STEP_COPY, "this llmgw runs from a checkout, not from llmgw.pyz, so there is no single "
                                    "file to copy; build one with `python3 build.py dist` and give "
                                    "--program dist/llmgw.pyz")
    path = Path(chosen)
    try:
        with zipfile.ZipFile(path) as zf:
            json.loads(zf.read("pyz-built-for.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        raise StepFailed(STEP_COPY, f"{path} is not an llmgw.pyz (it has no pyz-built-for.json); build one with "
                                    "`python3 build.py dist`") from None
    return path


def built_for(program: Path) -> dict[str, Any]:
    with zipfile.ZipFile(program) as zf:
        doc: dict[str, Any] = json.loads(zf.read("pyz-built-for.json"))
    return doc


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def python_fits(machine: dict[str, Any], carried: dict[str, Any], host: str, program: Path) -> None:
    """StepFailed unless the archive's compiled modules are for the machine's python3."""
    wanted = (f"CPython {', '.join(carried['pythons'])} on {carried['system']} {carried['machine']}")
    if (machine["implementation"] != carried.get("implementation", "cpython")
            or machine["system"] != carried["system"] or machine["machine"] != carried["machine"]):
        raise StepFailed(STEP_CHECK, f"{host} is {machine['system']} {machine['machine']} with "
                                     f"{machine['implementation']}, and {program.name} carries {wanted}; "
                                     f"build the program on a machine like it (python3 build.py dist)")
    if machine["python"] not in carried["pythons"]:
        raise StepFailed(STEP_CHECK, f"{host}'s python3 is {machine['python']}, and {program.name} carries "
                                     f"{wanted}; install one of those there, or build the program with "
                                     f"`python3 build.py dist --python {machine['python']}`")


async def add_node(job: NodeAdd, admin: Admin, report: Callable[[Progress], None]) -> dict[str, Any]:
    """Every step of installing a node over SSH; the node's id and name once it reports to the leader."""
    host = job.target.host
    layout = Layout(Path(job.root))
    changed = False

    def noted(progress: Progress) -> None:
        nonlocal changed
        changed = changed or progress.state == "done"
        report(progress)

    session, machine = await prepare(job, layout, report, noted)
    try:
        code = None
        if not machine["joined"]:
            made = await asyncio.to_thread(admin.call, "POST", "/api/v1/nodes/join-codes",
                                           {"name": job.name, "ttl": "30m", "control_planes": job.control_planes})
            code = made["code"]
        plan = NodePlan(machine=host, name=job.name, code=code, advertise=host, services=job.services,
                        program_changed=machine["copied"], labels=job.labels)
        node = await run_there(session, job, layout, "node", asdict(plan), noted)
    finally:
        session.close()
    await wait_reporting(admin, host, node, job.wait, report, fresh=changed)
    return node


async def prepare(job: NodeAdd, layout: Layout, report: Callable[[Progress], None],
                  noted: Callable[[Progress], None]) -> tuple[Session, dict[str, Any]]:
    """Logged in as root there, the machine checked against the archive, the archive copied: what it has."""
    session, machine = await checked(job, report)
    try:
        machine["copied"] = await copy_program(session, job, layout, machine, noted)
    except BaseException:
        session.close()
        raise
    return session, machine


async def checked(job: NodeAdd, report: Callable[[Progress], None]) -> tuple[Session, dict[str, Any]]:
    """Logged in as root there and the machine checked against the archive (its Python, its system): the
    session, and what the machine has. Nothing is written there."""
    host = job.target.host
    session, keys = await connect(job.target, job.credentials, job.known_hosts)
    try:
        await session.become_root()
        shown = f"host key {keys.first_use} recorded in {keys.path}" if keys.first_use else "host key as recorded"
        report(Progress(host, STEP_LOGIN, "done", f"{job.target}; {shown}"))

        report(Progress(host, STEP_CHECK, "doing"))
        status, out, err = await session.run_as_root(["python3", "-c", PROBE, job.root])
        if status != 0:
            said = (err.strip().splitlines() or [f"exit status {status}"])[-1]
            raise StepFailed(STEP_CHECK, f"{host} could not run python3 as root ({said}); install python3 there "
                                         "(apt install python3)")
        machine: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        carried = built_for(job.program)
        python_fits(machine, carried, host, job.program)
        report(Progress(host, STEP_CHECK, "done", f"python3 {machine['python']}, {machine['machine']}"))
    except BaseException:
        session.close()
        raise
    return session, machine


async def copy_program(session: Session, job: NodeAdd, layout: Layout, machine: dict[str, Any],
                       report: Callable[[Progress], None]) -> bool:
    """True when a new program was put there (so the service is restarted to run it)."""
    host = job.target.host
    digest = sha256(job.program)
    if machine["program_sha256"] == digest:
        report(Progress(host, STEP_COPY, "unchanged", f"{layout.program} has the same sha256"))
        return False
    report(Progress(host, STEP_COPY, "doing", f"{job.program.stat().st_size / 1e6:.0f} MB"))
    upload = f"/tmp/llmgw-upload-{secrets.token_hex(8)}.pyz"  # noqa: S108 - a name no one can guess; removed below
    try:
        await session.put(job.program, upload)
        status, _, err = await session.run_as_root(["install", "-D", "-m", "0755", upload, str(layout.program)])
    finally:
        await session.conn.run(f"rm -f {upload}", check=False)
    if status != 0:
        raise StepFailed(STEP_COPY, f"the program could not be put at {layout.program} on {host}: "
                                    f"{err.strip() or f'exit status {status}'}")
    report(Progress(host, STEP_COPY, "done", f"{layout.program}, sha256 {digest[:16]}…"))
    return True


async def run_there(session: Session, job: NodeAdd, layout: Layout, command: str, plan: dict[str, Any],
                    report: Callable[[Progress], None]) -> dict[str, Any]:
    """`llmgw onboard COMMAND` on the machine, its Progress lines passed on; what it reports at the end."""
    argv = ["python3", str(layout.program), "onboard", command, "--root", job.root]
    if not layout.real:
        argv = ["env", f"LLMGW_PYZ_CACHE={layout.cache}", *argv]
    result: dict[str, Any] | None = None
    stderr: list[str] = []
    async for line in session.lines_as_root(argv, json.dumps(plan) + "\n", stderr):
        progress = Progress.parse(line)
        if progress is not None:
            if progress.state == "failed":
                raise StepFailed(progress.step, progress.sentence)
            report(progress)
            continue
        try:
            result = json.loads(line)[command]
        except (ValueError, KeyError, TypeError):
            continue
    if result is None:
        said = [text for text in "".join(stderr[:-1]).strip().splitlines() if text.strip()]
        raise StepFailed(STEP_RUN, f"llmgw onboard {command} ended on {job.target.host} without finishing "
                                   f"({stderr[-1] if stderr else 'no exit status'}): "
                                   f"{said[-1] if said else 'it said nothing'}")
    return result


async def wait_reporting(admin: Admin, host: str, node: dict[str, Any], wait: float,
                         report: Callable[[Progress], None], fresh: bool) -> None:
    """Until the leader shows the node ready; "unchanged" when nothing was changed and it already was."""
    def seen() -> dict[str, Any] | None:
        nodes = admin.call("GET", "/api/v1/nodes")
        return next((n for n in nodes if n["id"] == node["id"] and n.get("state") == "ready"), None)

    already = None if fresh else await asyncio.to_thread(seen)
    if already:
        report(Progress(host, STEP_WAIT, "unchanged", f"{node['id']} reports to the leader"))
        return
    report(Progress(host, STEP_WAIT, "doing", f"{node['id']}, up to {wait:g} s"))
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if await asyncio.to_thread(seen):
            report(Progress(host, STEP_WAIT, "done", f"{node['id']} reports to the leader"))
            return
    raise StepFailed(STEP_WAIT, f"the node {node['id']} on {host} was installed but has not reported to the leader "
                                f"in {wait:g} s; see its log there (journalctl -u llmgw-agent, or "
                                "var/log/llmgw/llmgw-agent.service.log under the install's root when supervised) "
                                "and whether it reaches the control planes' agent port")
