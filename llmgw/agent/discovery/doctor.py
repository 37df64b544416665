"""`llmgw doctor`: what this node has, and what stands between it and serving models, each said so a person can act.

Checks only what is on the node itself or one TCP connect away: agent.yaml
read as the agent would, the directories the agent writes to, the
control planes' agent ports, the GPUs and their links, the engines'
programs on PATH, and the memory's read rate measured on the spot.

The checks run one after another and each is handed to `on_step` as it
ends, so that a person sees each as it is done: all at the end took 9 to
15 s of a blank screen, most of it the memory measurement (issue 11,
item 6).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llmgw import plugins
from llmgw.agent.discovery import bandwidth
from llmgw.agent.discovery.node import Discovery
from llmgw.agent.discovery.pcie import link_problem
from llmgw.agent.discovery.storage import existing
from llmgw.config import Address, AgentConfig, ConfigError, load_agent_config
from llmgw.engines import XLLAMACPP_VERSION, engine_dir

DEFAULT_CONFIG = "/etc/llmgw/agent.yaml"
CONNECT_TIMEOUT_S = 2.0
VERSION_TIMEOUT_S = 10.0

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
    engine_notes: dict[str, str] = field(default_factory=dict)
    """Engine name → what a person should know of it: its version, or that the agent installs it."""
    control_planes: list[dict[str, Any]] = field(default_factory=list)
    plugins: list[dict[str, Any]] = field(default_factory=list)
    """Every plugin found, llmgw's own first (llmgw/plugins.py Plugin.as_dict): loaded, or why not."""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Step = Callable[[str, "Report"], None]
"""Told each check's name once it is done ("config", "host", "engines", "plugins", "control planes",
"memory reads"), and "measuring" before the memory is read, with the report so far."""


def examine(config_path: str | None = None, measure: bool = True,
            measure_fn: Callable[[], float] = bandwidth.measure,
            connect: Callable[[str, int, float], None] | None = None,
            discovery: Discovery | None = None, on_step: Step | None = None,
            config_origin: str = "") -> Report:
    """Everything `llmgw doctor` prints. `config_path` None is /etc/llmgw/agent.yaml where there is one;
    `config_origin` says how the caller chose the one given ("checkout" when found walking up)."""
    step = on_step or (lambda _name, _report: None)
    report = Report()
    cfg = _config(report, config_path)
    if config_origin:
        report.config["origin"] = config_origin
    step("config", report)
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
    report.memory = _memory_totals()
    if report.host.get("gpu_note"):
        # skip_gpus is a choice somebody made, not a fault to fix.
        (report.notes if cfg.discovery.skip_gpus else report.problems).append(report.host["gpu_note"])
    for g in gpus:
        if g.mig is None and (why := link_problem(g)):
            report.problems.append(why)
    step("host", report)
    _engines(report, cfg)
    step("engines", report)
    _plugins(report, cfg)
    step("plugins", report)
    if not report.config.get("unusable"):
        # An agent.yaml that can't be used says nothing of where the agent
        # writes or whom it dials: checking the defaults instead would name
        # problems the node may not have.
        _directories(report, cfg)
        _control_planes(report, cfg, connect or tcp_connect)
    step("control planes", report)
    if measure:
        step("measuring", report)
        _bandwidth(report, measure_fn)
    report.host["mem_bandwidth_gbs"] = report.memory["bandwidth_gbs"]
    step("memory reads", report)
    return report


def _plugins(report: Report, cfg: AgentConfig) -> None:
    """Load every plugin group as the server and the agent would; one that fails is a problem to fix."""
    # quiet: the doctor says it once, as a problem, rather than as a log line too.
    found = plugins.load(plugins.GROUPS, args={plugins.WEIGHT_SOURCES: (cfg.weights,)}, quiet=True)
    report.plugins = found.as_list(builtin=True)
    for p in found.failed():
        report.problems.append(f"the plugin {p.name} ({p.distribution} {p.version}, {p.group}) {p.error}; "
                               f"the server and the agent leave it out: fix it, or uninstall "
                               f"{p.distribution}")


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


def _memory_totals() -> dict[str, Any]:
    import psutil

    vm = psutil.virtual_memory()
    return {"total_mb": vm.total >> 20, "available_mb": vm.available >> 20,
            "bandwidth_gbs": 0.0, "bandwidth_reader": ""}


def _bandwidth(report: Report, measure_fn: Callable[[], float]) -> None:
    started = time.monotonic()
    report.memory["bandwidth_gbs"] = round(measure_fn(), 1)
    if not report.memory["bandwidth_gbs"]:
        report.memory["bandwidth_not_measured"] = bandwidth.why_not(bandwidth.last_cache_bytes(),
                                                                    bandwidth.mem_available())
    report.memory["bandwidth_seconds"] = round(time.monotonic() - started, 1)
    report.memory["bandwidth_reader"] = bandwidth.reader_name()


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


def _engines(report: Report, cfg: AgentConfig) -> None:
    for engine, program in ENGINE_PROGRAMS.items():
        if engine in cfg.engines.disabled:
            continue
        if engine == "llamacpp":
            _llamacpp(report, cfg)
            continue
        report.engines[engine] = shutil.which(program) or ""
        if not report.engines[engine]:
            # Not a problem: only the models a site runs on that engine need it.
            report.engine_notes[engine] = f"needed only by models that run on {engine}"
    if "sim" not in cfg.engines.disabled:
        report.engines["sim"] = "llmgw sim-engine"


def _llamacpp(report: Report, cfg: AgentConfig) -> None:
    """Where the agent's llama.cpp server will come from, in the order the agent looks
    (llmgw/engines/llamacpp_install.py): agent.yaml's binary, PATH, its own install."""
    named = cfg.engines.llamacpp.binary
    if named:
        path = (named if os.path.isfile(named) and os.access(named, os.X_OK) else "") if os.sep in named \
            else (shutil.which(named) or "")
        if not path:
            report.engines["llamacpp"] = ""
            report.problems.append(
                f"agent.yaml's engines.llamacpp.binary is {named!r}, which is not a program on this node; "
                "give the full path of llama-server, or leave it empty and the agent installs one")
            return
    else:
        path = shutil.which("llama-server") or ""
    if path:
        report.engines["llamacpp"] = path
        version, why = binary_version(path)
        if why:
            report.problems.append(f"llama-server at {path} does not run: {why}; the agent cannot serve "
                                   "GGUF models with it (fix it, or remove it from PATH and the agent "
                                   "installs its own)")
        else:
            report.engine_notes["llamacpp"] = version
        return
    env = engine_dir(cfg.data_dir)
    # Built under another name and renamed into place once it works: a
    # folder of this name is a whole install.
    if env.is_dir():
        report.engines["llamacpp"] = str(env)
        report.engine_notes["llamacpp"] = f"xllamacpp {XLLAMACPP_VERSION}, installed by the agent"
    else:
        report.engines["llamacpp"] = ""
        report.engine_notes["llamacpp"] = (f"the agent installs it when a model first needs it (xllamacpp "
                                           f"{XLLAMACPP_VERSION} from PyPI, into {env})")


def binary_version(path: str) -> tuple[str, str]:
    """(llama-server's own version, "") or ("", why it did not run): a program that is there but
    does not start (a library missing) serves nothing either."""
    try:
        done = subprocess.run([path, "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "", f"`{os.path.basename(path)} --version` did not answer in {VERSION_TIMEOUT_S:.0f} s"
    except OSError as e:
        return "", e.strerror or str(e)
    said = (done.stdout + done.stderr).decode("utf-8", "replace")
    if done.returncode != 0:
        last = said.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return "", last[0]
    # llama-server --version prints "version: 6123 (a1b2c3d)" and a "built with" line.
    m = re.search(r"version:\s*(\S+(?:\s+\([0-9a-f]+\))?)", said)
    if not m:
        return "version unknown", ""
    return (f"b{m.group(1)}" if m.group(1)[:1].isdigit() else m.group(1)), ""


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
