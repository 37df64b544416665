"""Nodes: each node, its state and load, and each of its cards (GPUs) and replicas.

The same call as `llmgw ctl nodes` (GET /api/v1/nodes), and per node `llmgw
ctl node show NAME` for its replicas.
"""

from __future__ import annotations

from typing import Any

import urwid

from llmgw.console.overview import STATE_COLOUR
from llmgw.console.ui import App, text_list
from llmgw.control import AdminClient


def gib(mb: float | None) -> str:
    return "-" if mb is None else f"{mb / 1024:.1f}G"


class Nodes:
    title = "Nodes"
    command = "llmgw ctl nodes; llmgw ctl node show NAME"
    keys = ""

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def load(self) -> list[dict[str, Any]]:
        return self.client.call("GET", "/api/v1/nodes")

    def show(self, nodes: list[dict[str, Any]]) -> urwid.Widget:
        return text_list(node_rows(nodes))

    def keypress(self, app: App, key: str) -> bool:
        return False


def node_rows(nodes: list[dict[str, Any]]) -> list[Any]:
    if not nodes:
        return [("dim", "No nodes yet. On a control plane, `llmgw node add` prints a code; run `llmgw join CODE` "
                        "on the new machine.")]
    rows: list[Any] = []
    for n in sorted(nodes, key=lambda n: n["name"]):
        free = n.get("free") or {}
        rows += [[("title", n["name"]), f"  ({n['id']})  ",
                  (STATE_COLOUR.get(n["state"], ""), n["state"]), f"  version {n.get('version') or '-'}"],
                 f"  cores {free.get('cores', '-')} free of {n['cores']}, memory {gib(free.get('memory_mb'))} "
                 f"free of {gib(n['memory_mb'])}, {n['replicas']} replicas",
                 f"  engines: {', '.join(f'{k} {v}' for k, v in sorted(n['engines'].items())) or '-'}"]
        if n.get("labels"):
            rows.append(f"  labels: {', '.join(f'{k}={v}' for k, v in sorted(n['labels'].items()))}")
        if not n.get("gpus"):
            rows.append(("dim", "  no GPUs: CPU models only"))
        for g in n.get("gpus") or []:
            rows.append(f"  GPU {g['index']}  {g['name'] or g['class']}  {gib(g['memory_mb'])}, "
                        f"{gib(g['free_mb'])} free, {gib(g['foreign_mb'])} other programs")
        rows.append("")
    return rows
