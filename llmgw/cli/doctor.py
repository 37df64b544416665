"""`llmgw doctor`: what this node has, and what to fix before it can serve models."""

from __future__ import annotations

from llmgw.cli.output import emit_json, fields, table


def register(commands) -> None:
    doctor = commands.add_parser(
        "doctor", help="what this node has, and what to fix before it serves models",
        description="Run on a node: its CPUs, memory (and how fast it reads, measured now), disks, GPUs "
                    "(or why there are none), the engines found on PATH, and problems a person can act "
                    "on: agent.yaml unreadable, a directory the agent can't write, a control plane "
                    "that does not answer, a GPU in the wrong slot. Exit 0 with no problems, 1 with any.")
    doctor.add_argument("--config", metavar="PATH",
                        help="the agent's configuration (default /etc/llmgw/agent.yaml where it exists)")
    doctor.add_argument("--no-bandwidth", action="store_true",
                        help="skip measuring the memory's read rate (it reads up to 2 GB for a second or two)")
    doctor.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    doctor.set_defaults(run=run)


def run(args) -> int:
    from llmgw.agent.discovery.doctor import examine

    report = examine(args.config, measure=not args.no_bandwidth)
    if args.json:
        emit_json(report.as_dict())
    else:
        show(report)
    return 1 if report.problems else 0


def _gb(mb: float) -> str:
    return f"{mb / 1024:.1f} GB"


def show(report) -> None:
    h, mem = report.host, report.memory
    bw = f"{mem['bandwidth_gbs']:.1f} GB/s" if mem.get("bandwidth_gbs") else (
        "not measured" if not mem.get("bandwidth_reader") else "not measured: too little free memory")
    fields([
        ("node", h["hostname"]),
        ("os", f"{h['os']} (kernel {h['kernel']}, {h['arch']})"),
        ("cpu", f"{h['cpu_model']}: {h['cpu_cores']} cores, {h['cpu_threads']} threads"),
        ("memory", f"{_gb(mem['total_mb'])}, {_gb(mem['available_mb'])} available"),
        ("memory reads", bw),
        ("config", report.config["path"] + ("" if report.config.get("read") else " (not read)")),
    ])
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
    print()
    table(["engine", "program"], [(name, path or "not on PATH") for name, path in report.engines.items()])
    if report.control_planes:
        print()
        table(["control plane", "reachable", "detail"],
              [(cp["address"], "yes" if cp["reachable"] else "no",
                f"{cp['ms']} ms" if cp["reachable"] else cp["error"]) for cp in report.control_planes])
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
