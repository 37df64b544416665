"""Which GPUs this node has, read through NVML or else nvidia-smi; and, when it has none, whether that is a problem.

A node without any of an NVIDIA driver simply has no GPUs. A node with
some of one (the kernel module at /proc/driver/nvidia, NVML's library,
nvidia-smi) that still yields no GPUs has something to fix, and
Host.gpu_note says what each reader said, so the node's page and `llmgw
doctor` can tell "no GPUs" from "GPUs nobody can use".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from llmgw.agent.discovery.nvml import NVMLReader
from llmgw.agent.discovery.reader import GPUReader, GPUUnavailable, Inventory
from llmgw.agent.discovery.smi import SMIReader
from llmgw.config import DiscoverySettings

DRIVER_MARKER = "/proc/driver/nvidia"


@dataclass
class GPUFinding:
    inventory: Inventory = field(default_factory=Inventory)
    reader: GPUReader | None = None
    note: str = ""
    """Why there are no GPUs where a driver suggests there should be; "" otherwise."""


def find_gpus(settings: DiscoverySettings, nvml_lib: Any | None = None, driver_marker: str = DRIVER_MARKER,
              sysfs: str = "/sys/bus/pci/devices") -> GPUFinding:
    """Try NVML, then nvidia-smi; the first that lists cards is the reader kept for sensors."""
    if settings.skip_gpus:
        return GPUFinding(note="GPUs are not looked for: discovery.skip_gpus is set in agent.yaml")
    failures: list[str] = []
    driver_seen = os.path.exists(driver_marker)
    readers: list[GPUReader] = []
    try:
        readers.append(NVMLReader(nvml_lib, sysfs=sysfs))
    except GPUUnavailable as e:
        failures.append(str(e))
    readers.append(SMIReader(settings.nvidia_smi, sysfs=sysfs))
    for reader in readers:
        try:
            inv = reader.inventory()
        except GPUUnavailable as e:
            driver_seen = driver_seen or e.driver_seen
            failures.append(str(e))
            reader.close()
            continue
        if inv.gpus:
            return GPUFinding(inventory=inv, reader=reader)
        driver_seen = True
        failures.append(f"{reader.name} answered but lists no GPUs")
        reader.close()
    if not driver_seen:
        return GPUFinding()
    where = " (/proc/driver/nvidia)" if os.path.exists(driver_marker) else ""
    return GPUFinding(note=f"an NVIDIA driver is here{where} but no GPU can be used: " + "; ".join(failures))
