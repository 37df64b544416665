"""Reading the GPUs through NVML (nvidia-ml-py), the driver's own library.

The reader takes the library as an object (`lib`), by default the pynvml
module, and calls only its module-level nvml* functions and constants.
That is the seam the tests use: CI has no GPU and no driver, so they hand
in a small object of their own with the same functions, answering as a
two-card machine with NVLink and MIG would (tests/agent/discovery). The
real module is checked to import without a driver, and its functions'
names are checked to be the ones this file calls.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from llmgw.agent.discovery.pcie import bus_key, with_sysfs
from llmgw.agent.discovery.reader import GPUProcess, GPUUnavailable, Inventory, cuda_version, mig_index
from llmgw.protocol import GPU, GPUSensor, MIGDevice

MB = 1024 * 1024

# NVML's return codes, as its header numbers them (pynvml's NVML_ERROR_*).
LIBRARY_NOT_FOUND = 12
DRIVER_NOT_LOADED = 9
NO_PERMISSION = 4
LIB_RM_VERSION_MISMATCH = 18

# The most NVLink links a card has (NVML_NVLINK_MAX_LINKS).
MAX_LINKS = 36
LINK_TO_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH

_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+\w+)*)", re.IGNORECASE)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def default_lib() -> Any:
    """The pynvml module; GPUUnavailable when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        raise GPUUnavailable("nvidia-ml-py is not installed, so NVML cannot be read") from None
    return pynvml


def why_not(lib: Any, error: Exception) -> GPUUnavailable:
    """NVML's failure as a sentence a person can act on."""
    code = getattr(error, "value", None)
    if code == LIBRARY_NOT_FOUND:
        return GPUUnavailable("NVML's library (libnvidia-ml.so.1) is not installed", driver_seen=False)
    if code == DRIVER_NOT_LOADED:
        return GPUUnavailable("NVML is installed but the NVIDIA kernel driver is not loaded "
                              "(is the nvidia module loaded? `lsmod | grep nvidia`)", driver_seen=True)
    if code == LIB_RM_VERSION_MISMATCH:
        return GPUUnavailable("NVML and the loaded NVIDIA kernel driver are different versions, "
                              "usually a driver upgraded without a reboot: reboot the node", driver_seen=True)
    if code == NO_PERMISSION:
        return GPUUnavailable("NVML refused this user access to the GPUs (/dev/nvidia* permissions)",
                              driver_seen=True)
    return GPUUnavailable(f"NVML did not start: {error}", driver_seen=True)


class NVMLReader:
    """The GPUReader over NVML. NVML stays initialised until close(): sensors are read every few seconds."""

    name = "nvml"

    def __init__(self, lib: Any | None = None, sysfs: str = "/sys/bus/pci/devices") -> None:
        self._lib = lib if lib is not None else default_lib()
        self._sysfs = sysfs
        self._lock = threading.Lock()
        self._open = False
        self._gpus: list[GPU] = []

    @property
    def lib(self) -> Any:
        return self._lib

    def _start(self) -> None:
        if self._open:
            return
        try:
            self._lib.nvmlInit()
        except self._lib.NVMLError as e:
            raise why_not(self._lib, e) from None
        self._open = True

    def _call(self, fn: str, *args: Any, default: Any = None) -> Any:
        """One NVML call; `default` when the card or driver does not support it."""
        try:
            return getattr(self._lib, fn)(*args)
        except (self._lib.NVMLError, AttributeError):
            return default

    def handles(self) -> list[tuple[int, Any]]:
        """(index, handle) of every whole card."""
        self._start()
        count = self._call("nvmlDeviceGetCount", default=0)
        out = []
        for i in range(count):
            h = self._call("nvmlDeviceGetHandleByIndex", i)
            if h is not None:
                out.append((i, h))
        return out

    def inventory(self) -> Inventory:
        with self._lock:
            self._start()
            inv = Inventory(
                driver=_text(self._call("nvmlSystemGetDriverVersion", default="")),
                cuda=cuda_version(self._call("nvmlSystemGetCudaDriverVersion", default=0) or 0),
            )
            cards = self.handles()
            bus_of: dict[str, int] = {}
            for i, h in cards:
                pci = self._call("nvmlDeviceGetPciInfo", h)
                if pci is not None:
                    bus_of[bus_key(_text(pci.busId))] = i
            links = {i: self._links(h, bus_of) for i, h in cards}
            switched = {i for i, (_, via_switch) in links.items() if via_switch}
            for i, h in cards:
                card = self._card(i, h)
                peers, via_switch = links[i]
                if via_switch:
                    # Every link goes to an NVSwitch, whose far end is the switch's
                    # bus, not a card's: the card reaches every card on a switch.
                    peers |= switched - {i}
                card.nvlink_peers = sorted(peers - {i})
                migs = self._migs(i, card, h)
                if migs:
                    inv.gpus.extend(migs)
                else:
                    inv.gpus.append(card)
            self._gpus = inv.gpus
            return inv

    def _card(self, i: int, h: Any) -> GPU:
        g = GPU(index=i, source="nvml")
        g.name = _text(self._call("nvmlDeviceGetName", h, default=""))
        g.uuid = _text(self._call("nvmlDeviceGetUUID", h, default=""))
        mem = self._call("nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            g.memory_mb = int(mem.total) // MB
        cc = self._call("nvmlDeviceGetCudaComputeCapability", h)
        if cc:
            g.compute_capability = f"{cc[0]}.{cc[1]}"
        g.pcie_gen = self._call("nvmlDeviceGetMaxPcieLinkGeneration", h, default=0) or 0
        g.pcie_gpu_gen = self._call("nvmlDeviceGetGpuMaxPcieLinkGeneration", h, default=0) or 0
        g.pcie_width = self._call("nvmlDeviceGetCurrPcieLinkWidth", h, default=0) or 0
        g.pcie_width_max = self._call("nvmlDeviceGetMaxPcieLinkWidth", h, default=0) or 0
        pci = self._call("nvmlDeviceGetPciInfo", h)
        if pci is not None:
            with_sysfs(g, _text(pci.busId), self._sysfs)
        return g

    def _links(self, h: Any, bus_of: dict[str, int]) -> tuple[set[int], bool]:
        """The cards this one has an active NVLink to, and whether it links to an NVSwitch."""
        peers: set[int] = set()
        switch = False
        for link in range(MAX_LINKS):
            try:
                active = self._lib.nvmlDeviceGetNvLinkState(h, link)
            except self._lib.NVMLError:
                break  # past the card's last link, or a card without NVLink
            if not active:
                continue
            if self._call("nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == LINK_TO_SWITCH:
                switch = True
                continue
            remote = self._call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            if remote is not None and bus_key(_text(remote.busId)) in bus_of:
                peers.add(bus_of[bus_key(_text(remote.busId))])
        return peers, switch

    def _migs(self, i: int, card: GPU, h: Any) -> list[GPU]:
        """A card in MIG mode as its instances: what engines are given is an instance, never the card."""
        mode = self._call("nvmlDeviceGetMigMode", h)
        if not mode or mode[0] != 1:  # NVML_DEVICE_MIG_ENABLE
            return []
        out = []
        for j in range(self._call("nvmlDeviceGetMaxMigDeviceCount", h, default=0) or 0):
            m = self._call("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
            if m is None:
                continue  # a slot with no instance made in it
            name = _text(self._call("nvmlDeviceGetName", m, default=""))
            mem = self._call("nvmlDeviceGetMemoryInfo", m)
            profile = _MIG_PROFILE.search(name)
            out.append(GPU(
                index=mig_index(i, j),
                uuid=_text(self._call("nvmlDeviceGetUUID", m, default="")),
                name=name or card.name,
                memory_mb=int(mem.total) // MB if mem is not None else 0,
                compute_capability=card.compute_capability,
                mig=MIGDevice(parent_index=i, parent_uuid=card.uuid,
                              gpu_instance=self._call("nvmlDeviceGetGpuInstanceId", m, default=0) or 0,
                              compute_instance=self._call("nvmlDeviceGetComputeInstanceId", m, default=0) or 0,
                              profile=profile.group(1) if profile else ""),
                source="nvml",
            ))
        return out

    def _handle_of(self, gpu: GPU) -> Any:
        if gpu.mig is None:
            return self._call("nvmlDeviceGetHandleByIndex", gpu.index)
        parent = self._call("nvmlDeviceGetHandleByIndex", gpu.mig.parent_index)
        if parent is None:
            return None
        return self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent, gpu.index - mig_index(gpu.mig.parent_index, 0))

    def sensors(self) -> list[GPUSensor]:
        with self._lock:
            if not self._open:
                return []
            out = []
            for g in self._gpus:
                h = self._handle_of(g)
                if h is None:
                    continue
                s = GPUSensor(index=g.index)
                mem = self._call("nvmlDeviceGetMemoryInfo", h)
                if mem is not None:
                    s.memory_used_mb = int(mem.used) // MB
                if g.mig is None:
                    # No driver measures utilisation, heat or power per MIG instance.
                    util = self._call("nvmlDeviceGetUtilizationRates", h)
                    if util is not None:
                        s.utilization_percent = float(util.gpu)
                    s.temperature_c = float(self._call("nvmlDeviceGetTemperature", h, 0, default=0) or 0)
                    s.power_w = round((self._call("nvmlDeviceGetPowerUsage", h, default=0) or 0) / 1000, 1)
                    # Enforced, not the management limit: the lower of what an administrator
                    # set and what the board allows, the figure the card is held to.
                    s.power_limit_w = round((self._call("nvmlDeviceGetEnforcedPowerLimit", h, default=0) or 0)
                                            / 1000, 1)
                out.append(s)
            return out

    def processes(self) -> dict[int, list[GPUProcess]]:
        with self._lock:
            if not self._open:
                return {}
            out: dict[int, list[GPUProcess]] = {}
            for g in self._gpus:
                h = self._handle_of(g)
                procs = self._call("nvmlDeviceGetComputeRunningProcesses", h, default=None) if h is not None else None
                if procs is None:
                    continue
                # usedGpuMemory is None where the driver cannot say (WDDM, some MIG setups).
                out[g.index] = [GPUProcess(pid=int(p.pid), memory_mb=int(p.usedGpuMemory or 0) // MB) for p in procs]
            return out

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._call("nvmlShutdown")
                self._open = False

