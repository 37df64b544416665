"""How each card is linked to its host, and what to say when the link falls short.

An x16 card in a slot wired x8 or x4, behind a riser, or in a slot of an
older PCIe generation than its own links slower than it was built to, and
nothing else says so: a model on it still decodes at the card's memory
speed, but it loads slower, a replica split over cards by PCIe is slower,
and so is anything that spills to the host.

What is compared is the fastest generation card and slot allow together
(NVML's max link generation), never the current one: a card drops its
link to Gen1 while it idles, to save power, and would always read as
wrong. The card's own lane count comes from the kernel, because the
driver's "max width" is what card and slot allow together: an x16 card in
a slot wired x8 reads "x8 of x8" there while sysfs's max_link_width says 16.
"""

from __future__ import annotations

import os

from llmgw.protocol import GPU

# One lane's usable rate in GB/s each way, by generation (after encoding).
LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}

_SPEEDS = {"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16": 4, "16.0": 4, "32": 5, "32.0": 5, "64": 6, "64.0": 6}


def link_gbs(gen: int, width: int) -> float:
    return LANE_GBS.get(gen, 0.0) * width


def gen_of_speed(text: str) -> int:
    """The PCIe generation of a link speed as sysfs writes it ("16.0 GT/s PCIe"), 0 when unknown."""
    number = text.strip().split(" ", 1)[0]
    return _SPEEDS.get(number, 0) if "GT/s" in text else 0


def sysfs_bus_id(bus_id: str) -> str:
    """nvidia-smi's and NVML's 00000000:3B:00.0 as the kernel names it, 0000:3b:00.0; "" for what is not one."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep or len(domain) < 4 or not rest:
        return ""
    return domain[-4:] + ":" + rest


def bus_key(bus_id: str) -> str:
    """A bus id in one form whoever wrote it.

    NVML and nvidia-smi pad the domain to 8 digits, NVLink's far end and sysfs to 4.
    """
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    try:
        return f"{int(domain or '0', 16):04x}:{rest}" if rest else bus_id
    except ValueError:
        return bus_id


def with_sysfs(gpu: GPU, bus_id: str, root: str = "/sys/bus/pci/devices") -> None:
    """Take the card's own lanes, the lanes in use, and (when the driver did not say) its own fastest
    generation from the kernel."""
    dev = sysfs_bus_id(bus_id)
    if not dev:
        return

    def read(name: str) -> str:
        try:
            with open(os.path.join(root, dev, name)) as f:
                return f.read().strip()
        except OSError:
            return ""

    width_max, width = read("max_link_width"), read("current_link_width")
    if width_max.isdigit() and int(width_max) > 0:
        gpu.pcie_width_max = int(width_max)
    if width.isdigit() and int(width) > 0:
        gpu.pcie_width = int(width)
    gen = gen_of_speed(read("max_link_speed"))
    if gen and not gpu.pcie_gpu_gen:
        gpu.pcie_gpu_gen = gen


def link_problem(gpu: GPU) -> str:
    """How a card's link falls short of what the card could do, a sentence; "" when it does not or nobody said."""
    gen = gpu.pcie_gen or gpu.pcie_gpu_gen
    slow_gen = gpu.pcie_gpu_gen > 0 and 0 < gpu.pcie_gen < gpu.pcie_gpu_gen
    narrow = gpu.pcie_width_max > 0 and 0 < gpu.pcie_width < gpu.pcie_width_max
    if not slow_gen and not narrow:
        return ""
    why = []
    if narrow:
        why.append(f"x{gpu.pcie_width} of its x{gpu.pcie_width_max} lanes")
    if slow_gen:
        why.append(f"PCIe Gen{gpu.pcie_gen} of its Gen{gpu.pcie_gpu_gen}")
    has = link_gbs(gen, gpu.pcie_width)
    could = link_gbs(max(gpu.pcie_gpu_gen, gen), gpu.pcie_width_max)
    name = f" ({gpu.name})" if gpu.name else ""
    return (f"GPU {gpu.index}{name} is linked at {' and '.join(why)}: {has:.1f} GB/s where it could have "
            f"{could:.1f}. Check the slot (wired for fewer lanes, or an older generation), a riser, "
            "or the BIOS's PCIe setting")
