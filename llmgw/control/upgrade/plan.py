"""An upgrade's plan and progress, as kept in the store: which machines, in which order, and how far it got.

The order: the control planes one at a time, standbys first and the leader
last (leadership then moves to an upgraded standby); then the nodes in
waves of `wave_size`. Every machine is checked healthy on the new version
before the next is touched. The whole document is the store's upgrade
record (Store.get_upgrade/put_upgrade), so whichever control plane leads
drives it, and `llmgw upgrade --resume` carries on from any of them.

A rollback is a plan of its own: the machines the last upgrade touched, put
back on the version each ran before, nodes first and the leader last.
"""

from __future__ import annotations

import time
from typing import Any

PENDING, DOING, DONE, UNCHANGED, FAILED = "pending", "doing", "done", "unchanged", "failed"
RUNNING, STOPPED, FINISHED = "running", "stopped", "done"
CONTROL_PLANE, NODE = "control_plane", "node"


def make_plan(*, to: str, sha256: str, control_planes: list[dict[str, Any]], leader: str,
              nodes: list[dict[str, Any]], wave_size: int, by: str) -> dict[str, Any]:
    """A new upgrade to `to`: `control_planes` and `nodes` as llmgw.control.versions lists them."""
    standbys = sorted((cp for cp in control_planes if cp["name"] != leader), key=lambda cp: cp["name"])
    ordered = standbys + [cp for cp in control_planes if cp["name"] == leader]
    machines: list[dict[str, Any]] = []
    for wave, cp in enumerate(ordered):
        machines.append(_machine(CONTROL_PLANE, cp["name"], cp["name"], cp["version"], to, wave,
                                 address=cp["address"], role="leader" if cp["name"] == leader else "standby"))
    first = len(ordered)
    for i, node in enumerate(sorted(nodes, key=lambda n: (n["name"], n["id"]))):
        machines.append(_machine(NODE, node["id"], node["name"], node["version"], to, first + i // max(1, wave_size)))
    return {"to": to, "sha256": sha256, "rollback": False, "wave_size": wave_size, "state": RUNNING,
            "sentence": "", "started_at": time.time(), "by": by, "machines": machines}


def rollback_plan(last: dict[str, Any], sha256_of: dict[str, str], by: str) -> dict[str, Any]:
    """Put every machine the upgrade `last` touched back on the version it ran before: nodes first."""
    touched = [m for m in last["machines"] if m["state"] in (DOING, DONE, FAILED)]
    nodes = [m for m in touched if m["kind"] == NODE]
    planes = [m for m in touched if m["kind"] == CONTROL_PLANE]
    planes.sort(key=lambda m: m["role"] == "leader")
    machines = []
    for wave, m in enumerate(nodes + planes):
        machines.append(_machine(m["kind"], m["id"], m["name"], last["to"], m["from"], wave,
                                 address=m.get("address", ""), role=m.get("role", "")))
    return {"to": "", "sha256": "", "sha256_of": sha256_of, "rollback": True, "wave_size": 1, "state": RUNNING,
            "sentence": "", "started_at": time.time(), "by": by, "machines": machines}


def _machine(kind: str, ident: str, name: str, now: str, to: str, wave: int, *, address: str = "",
             role: str = "") -> dict[str, Any]:
    return {"kind": kind, "id": ident, "name": name, "from": now, "to": to, "wave": wave, "address": address,
            "role": role, "state": UNCHANGED if now == to else PENDING, "sentence": "", "since": 0.0,
            "ready_before": 0}


def current_wave(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The machines of the first wave not yet through: those to act on now."""
    open_ = [m for m in doc["machines"] if m["state"] in (PENDING, DOING)]
    if not open_:
        return []
    wave = min(m["wave"] for m in open_)
    return [m for m in doc["machines"] if m["wave"] == wave]


def where_it_stands(doc: dict[str, Any]) -> str:
    """Which machines are on which version: one line for a person, e.g. "cp1, cp2 on 0.2.0; gpu-1 on 0.1.0"."""
    on: dict[str, list[str]] = {}
    for m in doc["machines"]:
        version = m["to"] if m["state"] in (DONE, UNCHANGED) else m["from"]
        on.setdefault(version, []).append(m["name"])
    return "; ".join(f"{', '.join(names)} on {version}" for version, names in on.items())
