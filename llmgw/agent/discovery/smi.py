"""Reading the GPUs through nvidia-smi, where NVML's library cannot be loaded.

Every query is `nvidia-smi --query-…=FIELDS --format=csv,noheader,nounits`.
A driver that does not know one field refuses the whole query, so what
older drivers lack (compute_cap before 510, pcie.link.gen.gpumax, the MIG
mode) is asked apart, with a shorter list to fall back on: a missing
field must not cost a node its cards.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import threading

from llmgw.agent.discovery.pcie import bus_key, with_sysfs
from llmgw.agent.discovery.reader import GPUProcess, GPUUnavailable, Inventory, mig_index
from llmgw.protocol import GPU, GPUSensor, MIGDevice

# nvidia-smi waits on a hung driver for minutes; an agent must not.
TIMEOUT_S = 10.0

CARD_FIELDS = (
    ["index", "uuid", "name", "memory.total", "pci.bus_id", "driver_version", "compute_cap"],
    ["index", "uuid", "name", "memory.total", "pci.bus_id", "driver_version"],
)
PCIE_FIELDS = (
    ["index", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "pcie.link.gen.gpumax"],
    ["index", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max"],
)
SENSOR_FIELDS = (
    ["index", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw", "enforced.power.limit"],
    ["index", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw"],
)

_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")
_L_GPU = re.compile(r"^GPU (\d+): .*\(UUID: ([^)]+)\)")
_L_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)")


def parse_csv(text: str) -> list[list[str]]:
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    return [[cell.strip() for cell in row] for row in rows if row and any(c.strip() for c in row)]


def number(cell: str) -> float:
    """A cell as a number; 0 for "[N/A]", "[Not Supported]" and the like."""
    try:
        return float(cell)
    except ValueError:
        return 0.0


class SMIReader:
    """The GPUReader over the nvidia-smi command."""

    name = "nvidia-smi"

    def __init__(self, binary: str = "nvidia-smi", sysfs: str = "/sys/bus/pci/devices") -> None:
        self.binary = binary
        self._sysfs = sysfs
        self._lock = threading.Lock()
        self._gpus: list[GPU] = []
        # Which of SENSOR_FIELDS this driver takes, found on the first sample: a driver refusing the
        # longer list would otherwise cost a failed nvidia-smi run every heartbeat.
        self._sensor_fields = 0

    def path(self) -> str | None:
        return shutil.which(self.binary)

    def run(self, *args: str) -> str:
        """nvidia-smi's output; GPUUnavailable saying why when it has none to give."""
        path = self.path()
        if path is None:
            raise GPUUnavailable(f"{self.binary} is not installed (not found on PATH)", driver_seen=False)
        try:
            done = subprocess.run([path, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise GPUUnavailable(f"{self.binary} did not answer in {TIMEOUT_S:.0f} s: the driver may be hung",
                                 driver_seen=True) from None
        except OSError as e:
            raise GPUUnavailable(f"{self.binary} could not be run: {e.strerror}", driver_seen=True) from None
        if done.returncode != 0:
            said = (done.stdout.strip() or done.stderr.strip()).splitlines()
            raise GPUUnavailable(f"{self.binary} failed (exit {done.returncode})"
                                 + (f": {said[0].strip()}" if said else ""), driver_seen=True)
        return done.stdout

    def query(self, kind: str, fields: list[str]) -> list[list[str]]:
        return parse_csv(self.run(f"--query-{kind}={','.join(fields)}", "--format=csv,noheader,nounits"))

    def _first_answer(self, choices: tuple[list[str], ...]) -> list[list[str]]:
        """The first list of fields the driver takes; the last one's failure is raised."""
        for i, fields in enumerate(choices):
            try:
                return self.query("gpu", fields)
            except GPUUnavailable:
                if i == len(choices) - 1:
                    raise
        return []

    def inventory(self) -> Inventory:
        with self._lock:
            rows = self._first_answer(CARD_FIELDS)
            inv = Inventory()
            cards: list[GPU] = []
            bus: dict[int, str] = {}
            for row in rows:
                if len(row) < 6 or not row[0].isdigit():
                    continue
                g = GPU(index=int(row[0]), uuid=row[1], name=row[2], memory_mb=int(number(row[3])), source="nvidia-smi")
                if len(row) > 6 and number(row[6]) > 0:
                    g.compute_capability = row[6]
                bus[g.index] = row[4]
                inv.driver = inv.driver or row[5]
                cards.append(g)
            self._read_pcie(cards, bus)
            inv.cuda = self._cuda()
            inv.gpus = self._with_migs(cards, bus)
            self._gpus = inv.gpus
            return inv

    def _read_pcie(self, cards: list[GPU], bus: dict[int, str]) -> None:
        try:
            rows = self._first_answer(PCIE_FIELDS)
        except GPUUnavailable:
            rows = []
        links = {int(r[0]): r for r in rows if len(r) >= 4 and r[0].isdigit()}
        for g in cards:
            r = links.get(g.index)
            if r:
                g.pcie_gen, g.pcie_width, g.pcie_width_max = int(number(r[1])), int(number(r[2])), int(number(r[3]))
                if len(r) > 4:
                    g.pcie_gpu_gen = int(number(r[4]))
            with_sysfs(g, bus.get(g.index, ""), self._sysfs)

    def _cuda(self) -> str:
        """The newest CUDA the driver runs, from the banner of plain `nvidia-smi`: no query field says it."""
        try:
            m = _CUDA.search(self.run())
        except GPUUnavailable:
            return ""
        return m.group(1) if m else ""

    def _with_migs(self, cards: list[GPU], bus: dict[int, str]) -> list[GPU]:
        """Cards in MIG mode replaced by their instances, named by -L and sized by the full report (-q)."""
        try:
            rows = self.query("gpu", ["index", "mig.mode.current"])
            modes = {int(r[0]): r[1] for r in rows if len(r) > 1 and r[0].isdigit()}
        except GPUUnavailable:
            return cards  # a driver from before MIG
        if not any(m.lower() == "enabled" for m in modes.values()):
            return cards
        try:
            listed = parse_list(self.run("-L"))
            report = parse_mig_report(self.run("-q"))
        except GPUUnavailable:
            return cards
        out: list[GPU] = []
        for card in cards:
            if modes.get(card.index, "").lower() != "enabled":
                out.append(card)
                continue
            sizes = report.get(bus_key(bus.get(card.index, "")), {})
            for device, (profile, uuid) in sorted(listed.get(card.index, {}).items()):
                gi, ci, memory = sizes.get(device, (0, 0, 0))
                out.append(GPU(index=mig_index(card.index, device), uuid=uuid, name=f"{card.name} MIG {profile}",
                               memory_mb=memory, compute_capability=card.compute_capability,
                               mig=MIGDevice(parent_index=card.index, parent_uuid=card.uuid, gpu_instance=gi,
                                             compute_instance=ci, profile=profile),
                               source="nvidia-smi"))
        return out

    def sensors(self) -> list[GPUSensor]:
        with self._lock:
            wanted = {g.index for g in self._gpus if g.mig is None}
            if not wanted:
                return []
            rows = self._sensor_rows()
            out = []
            for r in rows:
                if len(r) < 5 or not r[0].isdigit() or int(r[0]) not in wanted:
                    continue
                out.append(GPUSensor(index=int(r[0]), utilization_percent=number(r[1]),
                                     memory_used_mb=int(number(r[2])), temperature_c=number(r[3]),
                                     power_w=number(r[4]), power_limit_w=number(r[5]) if len(r) > 5 else 0.0))
            return out

    def _sensor_rows(self) -> list[list[str]]:
        """The sensor query's rows with the longest field list the driver takes; [] when it answers none."""
        for i in range(self._sensor_fields, len(SENSOR_FIELDS)):
            try:
                rows = self.query("gpu", SENSOR_FIELDS[i])
            except GPUUnavailable:
                continue
            self._sensor_fields = i
            return rows
        return []

    def processes(self) -> dict[int, list[GPUProcess]]:
        with self._lock:
            by_uuid = {g.uuid: g.index for g in self._gpus if g.uuid and g.mig is None}
            if not by_uuid:
                return {}
            try:
                rows = self.query("compute-apps", ["gpu_uuid", "pid", "used_memory"])
            except GPUUnavailable:
                return {}
            out: dict[int, list[GPUProcess]] = {i: [] for i in by_uuid.values()}
            for r in rows:
                if len(r) >= 3 and r[0] in by_uuid and r[1].isdigit():
                    out[by_uuid[r[0]]].append(GPUProcess(pid=int(r[1]), memory_mb=int(number(r[2]))))
            return out

    def close(self) -> None:
        pass


def parse_list(text: str) -> dict[int, dict[int, tuple[str, str]]]:
    """`nvidia-smi -L`: per card, its MIG devices as {device: (profile, uuid)}."""
    out: dict[int, dict[int, tuple[str, str]]] = {}
    card = -1
    for line in text.splitlines():
        if m := _L_GPU.match(line):
            card = int(m.group(1))
            out.setdefault(card, {})
        elif (m := _L_MIG.match(line)) and card >= 0:
            out[card][int(m.group(2))] = (m.group(1), m.group(3).strip())
    return out


def parse_mig_report(text: str) -> dict[str, dict[int, tuple[int, int, int]]]:
    """`nvidia-smi -q`: per card's bus id, each MIG device's (GPU instance, compute instance, memory MB).

    The report is indented key : value lines. A card starts at "GPU
    00000000:3B:00.0"; its "MIG Devices" hold "MIG Device" blocks, each
    with an Index, its instance ids and an "FB Memory Usage" whose Total
    is the instance's memory.
    """
    out: dict[str, dict[int, tuple[int, int, int]]] = {}
    card = ""
    device: dict[str, int] | None = None
    in_fb = False
    fb_indent = 0
    section_indent = -1  # where "MIG Devices" is; a line back at it ends the last device

    def close() -> None:
        if device is not None and card and "index" in device:
            out.setdefault(card, {})[device["index"]] = (device.get("gi", 0), device.get("ci", 0), device.get("mb", 0))

    for line in text.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = (part.strip() for part in line.partition(":"))
        if indent == 0 and line.startswith("GPU "):
            close()
            device, card, section_indent = None, bus_key(line[4:].strip()), -1
            continue
        if key == "MIG Devices" and not sep:
            section_indent = indent
            continue
        if key == "MIG Device" and not sep:
            close()
            device, in_fb = {}, False
            continue
        if device is not None and indent <= section_indent:
            close()
            device, section_indent = None, -1
        if device is None:
            continue
        if key in ("FB Memory Usage",) and not value:
            in_fb, fb_indent = True, indent
            continue
        if in_fb and indent <= fb_indent:
            in_fb = False
        if key == "Index" and value.isdigit():
            device["index"] = int(value)
        elif key == "GPU Instance ID" and value.isdigit():
            device["gi"] = int(value)
        elif key == "Compute Instance ID" and value.isdigit():
            device["ci"] = int(value)
        elif in_fb and key == "Total":
            device["mb"] = int(number(value.split()[0])) if value else 0
    close()
    return out

