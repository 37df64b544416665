"""Overview: the control planes and which leads, the store, nodes, models and replicas, traffic.

The same admin API calls as `llmgw ctl status`, `ctl nodes`, `ctl models`
and `ctl replicas`. Requests a second and errors a second come from two
readings of the counters /api/v1/status returns, a refresh apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import urwid

from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient

STATE_COLOUR = {"ready": "good", "starting": "warn", "waiting": "warn", "fetching": "warn", "failed": "bad",
                "lost": "bad", "parked": "bad", "stopped": "dim", "stopping": "dim"}


@dataclass
class Reading:
    status: dict[str, Any]
    nodes: list[dict[str, Any]]
    models: list[dict[str, Any]]
    replicas: list[dict[str, Any]]
    at: float


def rates(now: Reading, before: Reading | None) -> tuple[float, float] | None:
    """(requests a second, errors a second) between two readings; None before a second reading.

    A control plane restarted between them counts from zero again: its
    counts fall, and the rate is taken from zero rather than shown negative.
    """
    if before is None or now.at <= before.at:
        return None
    seconds = now.at - before.at
    was, traffic = before.status.get("traffic") or {}, now.status.get("traffic") or {}
    out = []
    for key in ("requests", "errors"):
        delta = traffic.get(key, 0.0) - was.get(key, 0.0)
        out.append((delta if delta >= 0 else traffic.get(key, 0.0)) / seconds)
    return out[0], out[1]


class Overview:
    title = "Overview"
    command = "llmgw ctl status; llmgw ctl nodes; llmgw ctl models; llmgw ctl replicas"
    keys = ""

    def __init__(self, client: AdminClient) -> None:
        self.client = client
        self.last: Reading | None = None

    def load(self) -> tuple[Reading, Reading | None]:
        call = self.client.call
        reading = Reading(call("GET", "/api/v1/status"), call("GET", "/api/v1/nodes"),
                          call("GET", "/api/v1/models"), call("GET", "/api/v1/replicas"), time.monotonic())
        before, self.last = self.last, reading
        return reading, before

    def show(self, data: tuple[Reading, Reading | None]) -> urwid.Widget:
        reading, before = data
        return text_list(overview_rows(reading, rates(reading, before)))

    def keypress(self, app: App, key: str) -> bool:
        return False


def overview_rows(r: Reading, traffic: tuple[float, float] | None) -> list[Any]:
    status = r.status
    rows: list[Any] = [("title", "Control planes")]
    for cp in status.get("control_planes") or []:
        here = " (this one)" if cp["name"] == status["name"] else ""
        rows.append(["  ", ("good", "leads  ") if cp["leads"] else ("dim", "standby"),
                     f"  {cp['name']}{here}  agents at {cp['agent_address'] or '-'}"])
    if not status.get("leader"):
        rows.append(("bad", "  no control plane leads: nothing is placed or restarted until one does"))
    store = status["store"]
    rows += ["", ["Store  ", ("good", "up") if store["up"] else ("bad", "NOT ANSWERING"),
                  f"  {store['kind']} {store['address']}, schema {store['schema'] or '-'}"]]
    if traffic is None:
        rows.append("Traffic  requests a second and errors a second: measured from the next refresh")
    else:
        rows.append(["Traffic  ", f"{traffic[0]:.1f} requests a second, ",
                     ("bad" if traffic[1] else "dim", f"{traffic[1]:.1f} errors a second (5xx)")])
    rows += ["", ("title", f"Nodes ({len(r.nodes)})")]
    if not r.nodes:
        rows.append(("dim", "  none yet: llmgw node add prints a code a new node joins with"))
    for n in sorted(r.nodes, key=lambda n: n["name"]):
        cards = len(n.get("gpus") or [])
        rows.append(["  ", (STATE_COLOUR.get(n["state"], ""), f"{n['state']:<9}"),
                     f" {n['name']:<20} {n['replicas']} replicas, {cards} GPUs, {n.get('cores', 0)} cores"])
    rows += ["", ("title", f"Models ({len(r.models)})")]
    if not r.models:
        rows.append(("dim", "  none yet: the Models screen (2) adds one"))
    for m in r.models:
        rows.append(["  ", (STATE_COLOUR.get(m["state"], ""), f"{m['state']:<9}"),
                     f" {m['name']:<28} {m['replicas']['ready']}/{m['scaling']['min']} ready"])
        for rep in (x for x in r.replicas if x["model"] == m["name"]):
            rows.append(["      ", (STATE_COLOUR.get(rep["state"], ""), f"{rep['state']:<9}"),
                         f" {rep['id']} on {rep['node']}" + (f": {rep['message']}" if rep.get("message") else "")])
    return rows
