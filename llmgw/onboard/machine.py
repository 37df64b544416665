"""The machine's half of `llmgw node add --ssh`: `llmgw onboard node`, run as root on the new node.

The SSH side copies this program to the machine and runs it there with the
plan on stdin (one JSON line: it carries the join code, a secret, so never
on a command line). Each step below is done here, locally, and reported as
one Progress line on stdout; each can run again and then says "unchanged".
The last line is {"node": {"id": …, "name": …}}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from llmgw.errors import ExpectedError
from llmgw.files import write_atomic
from llmgw.onboard.layout import Layout
from llmgw.onboard.services import ServiceManager, service_manager, wait_active
from llmgw.onboard.steps import Progress, StepFailed, read_plan

AGENT_UNIT = "llmgw-agent.service"
USER = "llmgw"

STEP_USER = "make the llmgw user and directories"
STEP_CONFIG = "write agent.yaml"
STEP_JOIN = "join the cluster"
STEP_INSTALL = "install the service"
STEP_START = "start the service"


@dataclass(frozen=True)
class NodePlan:
    """What the SSH side asks of this machine."""

    machine: str  # how progress names this machine (the address it was reached at)
    name: str | None = None  # the node's name in the cluster; None keeps the host name
    code: str | None = None  # a join code, when the SSH side found the node not joined yet
    advertise: str = ""  # the address the control planes reach this node's engines at
    services: str | None = None  # "systemd" | "supervised" | None for this machine's default
    program_changed: bool = False  # a new program was copied: a running service is restarted to run it
    labels: dict[str, str] = field(default_factory=dict)  # merged into agent.yaml's labels (llmgw.role: judge)

    @classmethod
    def from_json(cls, text: str) -> NodePlan:
        return read_plan(cls, text, "llmgw node add --ssh")


Report = Callable[[Progress], None]


Step = tuple[str, Callable[[], tuple[bool, str]]]


def run_steps(machine: str, report: Report, steps: list[Step],
              start: Callable[[bool], tuple[bool, str]] | None, changed: bool = False) -> None:
    """Each step in turn, reported as it goes, then `start(changed)` (unless None): whether any step changed
    something.

    `changed` starts true when the SSH side copied a new program, which
    none of these steps sees.

    A step returns (changed, sentence); an expected error or an OSError
    becomes StepFailed naming the step.
    """

    def step(name: str, work: Callable[[], tuple[bool, str]]) -> None:
        nonlocal changed
        report(Progress(machine, name, "doing"))
        try:
            did, sentence = work()
        except StepFailed:
            raise
        except ExpectedError as e:
            raise StepFailed(name, f"{name}: {e}") from None
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            raise StepFailed(name, f"{name}: {where}{e.strerror}; run it as root (sudo)") from None
        changed = changed or did
        report(Progress(machine, name, "done" if did else "unchanged", sentence))

    for name, work in steps:
        step(name, work)
    if start is not None:
        step(STEP_START, lambda: start(changed))


def start_unit(manager: ServiceManager, unit: str) -> Callable[[bool], tuple[bool, str]]:
    """An install's last step: start `unit`, or restart it when an earlier step changed what it runs or reads."""

    def start(changed: bool) -> tuple[bool, str]:
        if not manager.status(unit).active:
            manager.start(unit)
            return True, f"pid {wait_active(manager, unit).pid}"
        if changed:
            manager.restart(unit)
            return True, f"restarted for its new files, pid {wait_active(manager, unit).pid}"
        return False, f"running, pid {manager.status(unit).pid}"

    return start


def install_node(layout: Layout, plan: NodePlan, report: Report) -> dict[str, Any]:
    """Every step of a node's install, in order; the node's id and name. StepFailed at the first that fails."""
    manager = service_manager(layout, plan.services)
    run_steps(plan.machine, report, [
        (STEP_USER, lambda: user_and_directories(layout)),
        (STEP_CONFIG, lambda: write_agent_config(layout, plan)),
        (STEP_JOIN, lambda: join_cluster(layout, plan)),
        (STEP_INSTALL, lambda: (manager.install(AGENT_UNIT), f"{AGENT_UNIT} ({manager.kind})")),
    ], start_unit(manager, AGENT_UNIT), changed=plan.program_changed)
    from llmgw.trust import node_identity

    config = _read_yaml(layout.agent_config)
    return {"id": node_identity(str(layout.agent_data)).node_id, "name": config.get("name") or plan.name or ""}


def user_and_directories(layout: Layout) -> tuple[bool, str]:
    made = []
    if layout.real and subprocess.run(["getent", "passwd", USER], capture_output=True).returncode != 0:
        done = subprocess.run(["useradd", "--system", "--user-group", "--home-dir", str(layout.server_data),
                               "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise StepFailed(STEP_USER, f"{STEP_USER}: useradd {USER} failed: {done.stderr.strip()}; "
                                        "make the user by hand and run again")
        made.append(f"the user {USER}")
    for path, mode in ((layout.etc, 0o755), (layout.agent_data, 0o700), (layout.logs, 0o750),
                       (layout.run, 0o755), (layout.program.parent, 0o755)):
        if not path.is_dir():
            path.mkdir(parents=True, mode=mode)
            made.append(str(path))
    if not made:
        return False, ""
    return True, ", ".join(made)


def _read_yaml(path: os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
    except FileNotFoundError:
        return {}
    if not isinstance(doc, dict):
        raise StepFailed(STEP_CONFIG, f"{STEP_CONFIG}: {path} is not a YAML mapping; fix or remove it, then run "
                                      "again")
    return doc


def agent_settings(layout: Layout, plan: NodePlan) -> dict[str, Any]:
    """The keys of agent.yaml the install owns; the others (control_planes, labels, …) are kept as they are."""
    wanted: dict[str, Any] = {"data_dir": str(layout.agent_data)}
    if plan.name:
        wanted["name"] = plan.name
    if plan.advertise:
        wanted["advertise"] = plan.advertise
    if plan.labels:
        wanted["labels"] = dict(plan.labels)  # merged with those written by hand, as a dict is below
    if not layout.real:
        # An install into a directory keeps its weights there too, and runs
        # its engines as the installing user: the machine's own accounts
        # (llmgw-engine) are not the directory's to make.
        wanted["cache_dir"] = str(layout.at("/var/cache/llmgw/weights"))
        wanted["engines"] = {"user": ""}
    return wanted


def write_agent_config(layout: Layout, plan: NodePlan) -> tuple[bool, str]:
    from llmgw.config import AgentConfig, ConfigError, from_dict

    path = layout.agent_config
    doc = _read_yaml(path)
    merged = dict(doc)
    for key, value in agent_settings(layout, plan).items():
        if isinstance(value, dict):
            merged[key] = {**(merged.get(key) or {}), **value}
        else:
            merged[key] = value
    if path.exists() and merged == doc:
        return False, str(path)
    try:
        from_dict(AgentConfig, merged)
    except ConfigError as e:
        raise StepFailed(STEP_CONFIG, f"{STEP_CONFIG}: {path}: {e}; fix it there and run again") from None
    text = ("# Written by llmgw node add --ssh; other keys: docs/reference.md#agentyaml\n"
            + yaml.safe_dump(merged, sort_keys=False, default_flow_style=False))
    write_atomic(path, text.encode(), 0o644)
    return True, str(path)


def join_cluster(layout: Layout, plan: NodePlan) -> tuple[bool, str]:
    from llmgw.trust import TrustError, join, node_identity

    try:
        known = node_identity(str(layout.agent_data))
        return False, f"already joined as {known.node_id}"
    except TrustError:
        pass
    if not plan.code:
        raise StepFailed(STEP_JOIN, f"{STEP_JOIN}: this node has not joined and was given no join code; "
                                    "run llmgw node add --ssh again")
    done = join(plan.code, str(layout.agent_data), str(layout.agent_config), name=plan.name)
    return True, f"joined as {done.name} ({done.node_id}) through {done.control_plane}"


def run(layout: Layout, stdin: str) -> int:
    """`llmgw onboard node`: the plan from stdin, Progress lines on stdout; 0 installed, 1 a step failed."""

    def report(progress: Progress) -> None:
        print(progress.line(), flush=True)

    plan = NodePlan(machine="this machine")
    try:
        plan = NodePlan.from_json(stdin)
        node = install_node(layout, plan, report)
    except StepFailed as failed:
        report(failed.progress(plan.machine))
        return 1
    print(json.dumps({"node": node}), flush=True)
    return 0


def main(root: str) -> int:
    from pathlib import Path

    return run(Layout(Path(root)), sys.stdin.readline())
