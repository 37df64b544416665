"""`llmgw doctor`: what this node has, and what to fix before it can serve models."""

from __future__ import annotations

import sys

from llmgw.cli.output import emit_json, table


def register(commands) -> None:
    doctor = commands.add_parser(
        "doctor", help="what this node has, and what to fix before it serves models",
        description="Run on a node: its CPUs, memory (and how fast it reads, measured now), disks, GPUs "
                    "(or why there are none), the engines it would run, the plugins installed "
                    "(docs/plugins.md), and problems a person can act on: agent.yaml unreadable, a plugin "
                    "that fails to load, a directory the agent can't write, a control plane "
                    "that does not answer, a GPU in the wrong slot, an engine program that does not run. "
                    "Each check is printed as it is done. Exit 0 with no problems, 1 with any.")
    doctor.add_argument("--config", metavar="PATH",
                        help="the agent's configuration (default var/node/agent.yaml of the checkout this is "
                             "run in, found walking up from here as git finds its folder, else "
                             "/etc/llmgw/agent.yaml where it exists)")
    doctor.add_argument("--no-bandwidth", action="store_true",
                        help="skip measuring the memory's read rate (it reads up to 2 GB, a few seconds)")
    doctor.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    doctor.set_defaults(run=run)


def run(args) -> int:
    from llmgw.agent import examine
    from llmgw.checkout import AGENT_CONFIG, checkout_file

    path, origin = args.config, "given" if args.config else ""
    if path is None and (found := checkout_file(AGENT_CONFIG)) is not None:
        path, origin = found, "checkout"
    if args.json:
        report = examine(path, measure=not args.no_bandwidth, config_origin=origin)
        emit_json(report.as_dict())
    else:
        report = examine(path, measure=not args.no_bandwidth, config_origin=origin, on_step=show_step)
    return 1 if report.problems else 0


def _gb(mb: float) -> str:
    return f"{mb / 1024:.1f} GB"


def _field(key: str, value: str) -> None:
    # One width for the fields of every step, printed apart: "memory reads:" is the longest key.
    print(f"{key + ':':<13} {value}")


def show_step(name: str, report) -> None:
    """Print what the check `name` found, as soon as it is done; flushed, since a pipe or a
    file would otherwise hold it until the end."""
    {"config": _show_config, "host": _show_host, "engines": _show_engines, "plugins": _show_plugins,
     "control planes": _show_control_planes, "measuring": _show_measuring,
     "memory reads": _show_end}[name](report)
    sys.stdout.flush()


def _show_config(report) -> None:
    cfg = report.config
    how = {"checkout": " (this checkout's, found walking up from here)"}.get(cfg.get("origin", ""), "")
    _field("config", cfg["path"] + how + ("" if cfg.get("read") else " (not read)"))


def _show_host(report) -> None:
    h, mem = report.host, report.memory
    _field("node", h["hostname"])
    _field("os", f"{h['os']} (kernel {h['kernel']}, {h['arch']})")
    _field("cpu", f"{h['cpu_model']}: {h['cpu_cores']} cores, {h['cpu_threads']} threads")
    _field("memory", f"{_gb(mem['total_mb'])}, {_gb(mem['available_mb'])} available")
    print()
    table(["disk", "device", "free", "total"],
          [(s["path"], s["device"], f"{s['free_bytes'] / 1e9:.1f} GB", f"{s['total_bytes'] / 1e9:.1f} GB")
           for s in report.storage])
    print()
    if report.gpus:
        print(f"GPUs, read through {report.gpu_reader}: driver {h['nvidia_driver'] or '?'}, "
              f"CUDA {h['cuda_version'] or '?'}")
        table(["gpu", "name", "memory", "cc", "pcie", "nvlink"],
              [(g["index"], g["name"], _gb(g["memory_mb"]), g["compute_capability"], _link(g),
                ",".join(str(p) for p in g["nvlink_peers"]) or "-") for g in report.gpus])
    else:
        print("GPUs: none" + (f": {h['gpu_note']}" if h.get("gpu_note") else ""))


def _show_engines(report) -> None:
    print()

    def program(name: str, path: str) -> str:
        note = report.engine_notes.get(name, "")
        if path:
            return f"{path} ({note})" if note else path
        if name == "llamacpp" and note:
            return f"not installed yet: {note}"
        return "not on PATH" + (f"; {note}" if note else "")

    table(["engine", "program"], [(name, program(name, path)) for name, path in report.engines.items()])


def _show_plugins(report) -> None:
    print()
    table(["plugin group", "name", "from", "gives"],
          [(p["group"], p["name"], f"{p['distribution']} {p['version']}".rstrip(),
            ", ".join(p["provides"]) if p["loaded"] else f"NOT LOADED: it {p['error']}")
           for p in report.plugins])


def _show_control_planes(report) -> None:
    if report.control_planes:
        print()
        table(["control plane", "reachable", "detail"],
              [(cp["address"], "yes" if cp["reachable"] else "no",
                f"{cp['ms']} ms" if cp["reachable"] else cp["error"]) for cp in report.control_planes])


def _show_measuring(report) -> None:
    print()
    print("measuring how fast the memory reads (up to 2 GB, a few seconds; --no-bandwidth skips it) …")


def _show_end(report) -> None:
    mem = report.memory
    if mem.get("bandwidth_reader"):
        _field("memory reads", f"{mem['bandwidth_gbs']:.1f} GB/s" if mem.get("bandwidth_gbs")
               else f"not measured: {mem.get('bandwidth_not_measured') or 'too little free memory'}")
    for note in report.notes:
        print(f"\nnote: {note}")
    print()
    if report.problems:
        print(f"{len(report.problems)} problem{'s' if len(report.problems) != 1 else ''}:")
        for p in report.problems:
            print(f"  - {p}")
    else:
        print("no problems found")


def _link(g) -> str:
    if g.get("mig"):
        return "-"
    if not g["pcie_width"]:
        return "?"
    gen = g["pcie_gen"] or g["pcie_gpu_gen"]
    text = f"Gen{gen} x{g['pcie_width']}"
    if g["pcie_width_max"] and g["pcie_width_max"] != g["pcie_width"]:
        text += f" of x{g['pcie_width_max']}"
    return text
