"""The node's overview: what this machine is doing, read on the machine itself.

No admin token and no control plane is needed: everything here is read
from agent.yaml and the agent's own files in its data directory (the
state it rewrites every few seconds and its warnings, agent/statefile.py;
its engines' records, agent/supervisor/records.py), so it still works
while the control plane is out of reach, which is when it is wanted.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urwid

from llmgw import __version__
from llmgw.agent import AgentState, ShardRecord, read_all, read_state, recent_warnings
from llmgw.config import AgentConfig
from llmgw.console.ui import App, text_list

STALE_AFTER = 15.0  # seconds without a new agent-state.json: the agent is not running (it writes every 3)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers(address: str, timeout: float = 1.0) -> bool:
    """Whether something takes a TCP connection at HOST:PORT (the control plane's agent port)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def span(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds >= 86400:
        return f"{seconds // 86400}d {seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds}s"


@dataclass
class NodeReading:
    config_path: str
    cfg: AgentConfig
    state: AgentState | None
    running: bool
    control_planes: list[tuple[str, bool]]
    engines: list[tuple[ShardRecord, bool]]
    space: list[tuple[str, str, int | None, int | None]]  # (what, path, free, total)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    at: float = 0.0


def read_node(config_path: str, cfg: AgentConfig) -> NodeReading:
    now = time.time()
    state = read_state(cfg.data_dir)
    running = bool(state and alive(state.pid) and now - state.written_at < STALE_AFTER)
    known = list(dict.fromkeys(list(cfg.control_planes) + (state.control_planes if state else [])))
    records, _ = read_all(Path(cfg.data_dir) / "engines-run")
    space: list[tuple[str, str, int | None, int | None]] = []
    for what, path in (("weights", cfg.cache_dir), ("engines", os.path.join(cfg.data_dir, "engines")),
                       ("agent data", cfg.data_dir)):
        probe = path
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe.rstrip("/")) or "/"
        try:
            usage = shutil.disk_usage(probe)
            space.append((what, path, usage.free, usage.total))
        except OSError:
            space.append((what, path, None, None))
    return NodeReading(config_path, cfg, state, running, [(a, answers(a)) for a in known],
                       [(r, alive(r.pid)) for r in records], space, recent_warnings(cfg.data_dir, now=now), now)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def node_rows(r: NodeReading) -> list[Any]:
    s = r.state
    if r.running and s is not None:
        who = f"connected to {s.leader}" if s.leader else "not connected: dialling the control planes"
        agent = [("good", "running"), f" (pid {s.pid}) for {span(r.at - s.started_at)}; {who}"
                 f" for {span(r.at - s.since)}"]
    elif s is not None:
        agent = [("bad", "NOT RUNNING"), f": its last state was written {span(r.at - s.written_at)} ago "
                                         "(systemctl status llmgw-agent)"]
    else:
        agent = [("bad", "NEVER RAN"), f": no agent-state.json in {r.cfg.data_dir} (systemctl start llmgw-agent)"]
    rows: list[Any] = [
        ["Agent        ", *agent],
        f"Node         {r.cfg.node_name}" + (f" ({s.node_id})" if s else ""),
        f"agent.yaml   {r.config_path}",
        f"llmgw        {__version__} here" + (f", the agent runs {s.version}" if s and s.version != __version__
                                              else ""),
        "", ("title", "Control planes"),
    ]
    if not r.control_planes:
        rows.append(("bad", "  none: run `llmgw join CODE` with a code from `llmgw node add`"))
    for address, up in r.control_planes:
        leads = " (connected: the leader)" if s and r.running and s.leader == address else ""
        rows.append(["  ", ("good", "answers ") if up else ("bad", "NO ANSWER"), f" {address}{leads}"])
    rows += ["", ("title", "GPUs")]
    cards = s.gpus if s else []
    if not cards:
        rows.append(("dim", "  none found: CPU engines only"))
    models = {rec.shard_id: rec.model for rec, _ in r.engines}
    for g in cards:
        index = g.get("index")
        on = sorted({models.get(shard, shard) for shard, gpus in (s.shard_gpus if s else {}).items()
                     if index in gpus and shard in models})
        sensed = ""
        if "utilization_percent" in g:
            sensed = (f", {g['utilization_percent']:.0f}% busy, {_size(g['memory_used_mb'] << 20)} used, "
                      f"{g['temperature_c']:.0f}°C")
        rows.append(f"  GPU {index}  {g.get('name') or '-'}  {_size(g.get('memory_mb', 0) << 20)}{sensed}"
                    + (f"  models: {', '.join(on)}" if on else ""))
    rows += ["", ("title", "Engines (the agent's own records)")]
    if not r.engines:
        rows.append(("dim", "  none running"))
    for rec, up in r.engines:
        program = _program(rec.command)
        age = span(r.at - (rec.started_at or rec.create_time))
        rows.append(["  ", ("good", "running") if up else ("bad", "GONE   "),
                     f" {rec.shard_id}  {rec.model or '-'}  {program}  port {rec.port or '-'}  pid {rec.pid}"
                     f"  for {age}"])
    rows += ["", ("title", "Free space")]
    for what, path, free, total in r.space:
        rows.append(f"  {what:<11} {path}: {_size(free)} free of {_size(total)}")
    rows += ["", ("title", "Warnings and errors, the last hour")]
    if not r.warnings:
        rows.append(("dim", "  none"))
    for w in r.warnings[-20:]:
        rows.append([("bad" if w.get("level") in ("error", "critical") else "warn",
                      f"  {time.strftime('%H:%M:%S', time.localtime(w['at']))} {w.get('level', '')}"),
                     f" {w.get('text', '')}"])
    return rows


def _program(command: list[str]) -> str:
    """What an engine runs, for a person: `llmgw sim-engine` rather than the interpreter that runs it."""
    if not command:
        return "-"
    if os.path.basename(command[0]).startswith("python") and "-m" in command[:-1]:
        at = command.index("-m")
        return " ".join(command[at + 1:at + 3])
    return os.path.basename(command[0])


class NodeOverview:
    title = "Overview"
    command = "systemctl status llmgw-agent; llmgw ctl node show NAME (on a control plane)"
    keys = ""

    def __init__(self, config_path: str, cfg: AgentConfig) -> None:
        self.config_path, self.cfg = config_path, cfg

    def load(self) -> NodeReading:
        return read_node(self.config_path, self.cfg)

    def show(self, reading: NodeReading) -> urwid.Widget:
        return text_list(node_rows(reading))

    def keypress(self, app: App, key: str) -> bool:
        return False
