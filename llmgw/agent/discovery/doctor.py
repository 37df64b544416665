"""`llmgw doctor`: what this node has, and what stands between it and serving models, each said so a person can act.

Checks only what is on the node itself or one TCP connect away: agent.yaml
read as the agent would, the directories the agent writes to, the
control planes' agent ports, the GPUs and their links, the engines'
programs on PATH, and the memory's read rate measured on the spot.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from llmgw.agent.discovery import bandwidth
from llmgw.agent.discovery.node import Discovery
from llmgw.agent.discovery.pcie import link_problem
from llmgw.agent.discovery.storage import existing
from llmgw.config.agent import AgentConfig, load_agent_config
from llmgw.config.loader import ConfigError
from llmgw.config.types import Address

DEFAULT_CONFIG = "/etc/llmgw/agent.yaml"
CONNECT_TIMEOUT_S = 2.0

# The programs each engine runs, looked for on PATH; llama.cpp's can be named in agent.yaml instead.
ENGINE_PROGRAMS = {"llamacpp": "llama-server", "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm-serve"}


@dataclass
class Report:
    config: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    storage: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    gpu_reader: str = ""
    engines: dict[str, str] = field(default_factory=dict)
    """Engine name → the program found for it (a path), "" where none was."""
    control_planes: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def examine(config_path: str | None = None, measure: bool = True,
            measure_fn: Callable[[], float] = bandwidth.measure,
            connect: Callable[[str, int, float], None] | None = None,
            discovery: Discovery | None = None) -> Report:
    """Everything `llmgw doctor` prints. `config_path` None is /etc/llmgw/agent.yaml where there is one."""
    report = Report()
    cfg = _config(report, config_path)
    d = discovery or Discovery(cfg.discovery, [cfg.cache_dir, cfg.data_dir], measure_bandwidth=False)
    try:
        host, gpus, storage = d.register_parts()
        report.gpu_reader = d.gpu_reader
    finally:
        if discovery is None:
            d.close()
    report.host = dataclasses.asdict(host)
    report.storage = [dataclasses.asdict(s) for s in storage]
    report.gpus = [dataclasses.asdict(g) for g in gpus]
    report.memory = _memory(measure, measure_fn)
    report.host["mem_bandwidth_gbs"] = report.memory["bandwidth_gbs"]
    if report.host.get("gpu_note"):
        # skip_gpus is a choice somebody made, not a fault to fix.
        (report.notes if cfg.discovery.skip_gpus else report.problems).append(report.host["gpu_note"])
    for g in gpus:
        if g.mig is None and (why := link_problem(g)):
            report.problems.append(why)
    report.engines = _engines(cfg)
    if not report.config.get("unusable"):
        # An agent.yaml that can't be used says nothing of where the agent
        # writes or whom it dials: checking the defaults instead would name
        # problems the node may not have.
        _directories(report, cfg)
        _control_planes(report, cfg, connect or tcp_connect)
    return report


def _config(report: Report, path: str | None) -> AgentConfig:
    explicit = path is not None
    path = path or DEFAULT_CONFIG
    report.config = {"path": path, "read": False}
    if not explicit and not os.path.exists(path):
        report.notes.append(f"no agent.yaml at {path}: showing the defaults (--config names another)")
        return AgentConfig()
    try:
        cfg = load_agent_config(path)
    except ConfigError as e:
        report.problems.append(f"agent.yaml can't be used: {e}")
        report.config["unusable"] = True
        return AgentConfig()
    report.config.update(read=True, node=cfg.node_name, control_planes=list(cfg.control_planes),
                         cache_dir=cfg.cache_dir, data_dir=cfg.data_dir)
    return cfg


def _memory(measure: bool, measure_fn: Callable[[], float]) -> dict[str, Any]:
    import psutil

    vm = psutil.virtual_memory()
    out: dict[str, Any] = {"total_mb": vm.total >> 20, "available_mb": vm.available >> 20,
                           "bandwidth_gbs": 0.0, "bandwidth_reader": ""}
    if measure:
        started = time.monotonic()
        out["bandwidth_gbs"] = round(measure_fn(), 1)
        out["bandwidth_seconds"] = round(time.monotonic() - started, 1)
        out["bandwidth_reader"] = bandwidth.reader_name()
    return out


def writable(directory: str) -> str:
    """"" when the agent can write in `directory` (made if missing), else why not.

    Tried with a real file rather than os.access: root passes os.access on
    a read-only mount, and an NFS export squashing root says yes and then no.
    """
    there = existing(directory)
    if there != os.path.abspath(directory) and not os.path.isdir(there):
        return f"{there} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=there, prefix=".llmgw-doctor-"):
            pass
    except OSError as e:
        if there != os.path.abspath(directory):
            return f"it does not exist, and {there} where it would be made is not writable ({e.strerror})"
        return f"it is not writable ({e.strerror})"
    return ""


def _directories(report: Report, cfg: AgentConfig) -> None:
    for key, path in (("cache_dir", cfg.cache_dir), ("data_dir", cfg.data_dir)):
        why = writable(path)
        if why:
            report.problems.append(f"{key} {path}: {why}; the agent must write there "
                                   f"(run it as a user who can, or set {key} in agent.yaml)")


def _engines(cfg: AgentConfig) -> dict[str, str]:
    out = {}
    for engine, program in ENGINE_PROGRAMS.items():
        if engine in cfg.engines.disabled:
            continue
        named = cfg.engines.llamacpp.binary if engine == "llamacpp" else ""
        out[engine] = (shutil.which(named) or "") if named else (shutil.which(program) or "")
    if "sim" not in cfg.engines.disabled:
        out["sim"] = "llmgw sim-engine"
    return out


def tcp_connect(host: str, port: int, timeout: float) -> None:
    with socket.create_connection((host, port), timeout=timeout):
        pass


def _control_planes(report: Report, cfg: AgentConfig, connect: Callable[[str, int, float], None]) -> None:
    if not cfg.control_planes:
        if report.config.get("read"):
            report.notes.append("agent.yaml lists no control planes: run `llmgw join CODE` on this node")
        return

    def check(entry: str) -> dict[str, Any]:
        addr = Address(entry)
        started = time.monotonic()
        try:
            connect(addr.host, addr.port, CONNECT_TIMEOUT_S)
        except OSError as e:
            why = "no answer in 2 s" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            return {"address": entry, "reachable": False, "error": why}
        return {"address": entry, "reachable": True, "ms": round(1000 * (time.monotonic() - started), 1)}

    with ThreadPoolExecutor(max_workers=min(8, len(cfg.control_planes))) as pool:
        report.control_planes = list(pool.map(check, cfg.control_planes))
    for cp in report.control_planes:
        if not cp["reachable"]:
            report.problems.append(f"control plane {cp['address']} can't be reached: {cp['error']}; "
                                   "is it running, and does the firewall let this node reach its agent port?")
