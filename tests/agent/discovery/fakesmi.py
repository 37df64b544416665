"""A real `nvidia-smi` for machines without one: a shell script that prints captured output for each exact command line.

CI has no GPU, so the nvidia-smi reader is tested against this script put
first on PATH: the reader runs a real process, reads real CSV, and meets
real exit codes, as it would on a node. The outputs below are in the
form a 550-series driver prints them (two PCIe cards, an A100 in MIG mode).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CARDS = ("index,uuid,name,memory.total,pci.bus_id,driver_version,compute_cap")
CARDS_OLD = "index,uuid,name,memory.total,pci.bus_id,driver_version"
PCIE = "index,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,pcie.link.gen.gpumax"
PCIE_OLD = "index,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
MIG_MODE = "index,mig.mode.current"
SENSORS = "index,utilization.gpu,memory.used,temperature.gpu,power.draw,enforced.power.limit"
SENSORS_OLD = "index,utilization.gpu,memory.used,temperature.gpu,power.draw"
APPS = "gpu_uuid,pid,used_memory"
CSV = "--format=csv,noheader,nounits"

BANNER = """Tue Mar  4 10:12:01 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""

# Card 1 is an x16 card in a slot wired x8.
TWO_CARDS = {
    f"--query-gpu={CARDS} {CSV}": (
        "0, GPU-8a1c1d3e-6f2b-4c55-9b0e-1f0e2d3c4b5a, NVIDIA L40S, 46068, 00000000:17:00.0, 550.54.15, 8.9\n"
        "1, GPU-0b9e8d7c-1a2b-4c3d-8e9f-a0b1c2d3e4f5, NVIDIA L40S, 46068, 00000000:CA:00.0, 550.54.15, 8.9\n"),
    f"--query-gpu={PCIE} {CSV}": "0, 4, 16, 16, 4\n1, 4, 8, 16, 4\n",
    f"--query-gpu={MIG_MODE} {CSV}": "0, [N/A]\n1, [N/A]\n",
    "": BANNER,
    f"--query-gpu={SENSORS} {CSV}": "0, 92, 23000, 71, 239.52, 350.00\n1, 0, 512, 30, 35.10, 350.00\n",
}

A100_MIG = {
    f"--query-gpu={CARDS} {CSV}": (
        "0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a3e, NVIDIA A100 80GB PCIe, 81920, 00000000:17:00.0, "
        "550.54.15, 8.0\n"),
    f"--query-gpu={PCIE} {CSV}": "0, 4, 16, 16, 4\n",
    f"--query-gpu={MIG_MODE} {CSV}": "0, Enabled\n",
    "": BANNER,
    "-L": ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a3e)\n"
           "  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
           "  MIG 2g.20gb     Device  1: (UUID: MIG-2a5b7e3c-8b1d-5f0e-a6c4-3d2e1f0a9b8c)\n"),
    "-q": """
==============NVSMI LOG==============

Timestamp                                 : Tue Mar  4 10:12:01 2025
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:17:00.0
    Product Name                          : NVIDIA A100 80GB PCIe
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 2
            Compute Instance ID           : 0
            Device Attributes
                Shared
                    Multiprocessor count  : 42
                    Copy Engine count     : 3
            ECC Errors
                Volatile
                    SRAM Uncorrectable    : 0
            FB Memory Usage
                Total                     : 40192 MiB
                Reserved                  : 0 MiB
                Used                      : 37 MiB
                Free                      : 40154 MiB
            BAR1 Memory Usage
                Total                     : 65535 MiB
                Used                      : 0 MiB
                Free                      : 65535 MiB
        MIG Device
            Index                         : 1
            GPU Instance ID               : 3
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 19968 MiB
                Reserved                  : 0 MiB
                Used                      : 13 MiB
                Free                      : 19954 MiB
            BAR1 Memory Usage
                Total                     : 32767 MiB
                Used                      : 0 MiB
                Free                      : 32767 MiB
    Accounting Mode                       : Disabled
    FB Memory Usage
        Total                             : 81920 MiB
        Used                              : 50 MiB
    Processes
        GPU instance ID                   : 9
        Compute instance ID               : 9
""",
}

# What nvidia-smi prints when the kernel module is not loaded or does not match.
DRIVER_GONE = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n", 9)


def install(directory: Path, answers: dict[str, str | tuple[str, int]]) -> Path:
    """Write an `nvidia-smi` into `directory` answering each exact command line.

    Any other command line exits 2, as a driver refuses an unknown field.
    """
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/sh", 'PATH="$PATH:/usr/bin:/bin"', f'echo "$*" >> "{directory}/calls"', 'case "$*" in']
    for i, (args, answer) in enumerate(answers.items()):
        text, code = (answer, 0) if isinstance(answer, str) else answer
        (directory / f"answer{i}").write_text(text)
        lines.append(f'  "{args}") cat "{directory}/answer{i}"; exit {code} ;;')
    lines.append('  *) echo "Field \\"$*\\" is not a valid field to query."; exit 2 ;;')
    lines.append("esac")
    script = directory / "nvidia-smi"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def calls(directory: Path) -> list[str]:
    path = directory / "calls"
    return path.read_text().splitlines() if path.exists() else []


def on_path(monkeypatch, directory: Path) -> None:
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
