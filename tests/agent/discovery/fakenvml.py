"""A stand-in for the pynvml module, answering as a machine with GPUs would.

Why: CI has no GPU and no driver, and NVML cannot be loaded without one.
The NVML reader takes its library as an object (llmgw/agent/discovery/
nvml.py), so the tests hand it this one: the same function names and
constants as pynvml, raising pynvml's own NVMLError, and returning
pynvml's own ctypes structures where the real one does (PCI info, memory,
utilisation, GPM's metrics request). test_the_fake_calls_only_what_pynvml_has
keeps the names honest against the installed nvidia-ml-py.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

MiB = 1024 * 1024


@dataclass
class FakeMIG:
    name: str
    uuid: str
    total_mb: int
    used_mb: int
    gpu_instance: int
    compute_instance: int


@dataclass
class FakeCard:
    name: str
    uuid: str
    bus: str  # "00000000:3B:00.0"
    total_mb: int
    used_mb: int = 0
    cc: tuple[int, int] = (9, 0)
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)  # max gen, card's max gen, width now, max width
    links: list[str] = field(default_factory=list)  # the far end of each active NVLink: a bus id, or "switch"
    migs: list[FakeMIG] = field(default_factory=list)
    util: int = 0
    temp: int = 40
    power_mw: int = 70000
    power_limit_mw: int | None = 700000  # None: the driver says NOT_SUPPORTED, as on some GeForce boards
    procs: list[tuple[int, int]] = field(default_factory=list)  # (pid, MB)
    gpm: dict[int, float] | None = None  # GPM metric id -> value; None: no GPM (before Hopper)


class FakeNVML:
    NVMLError = pynvml.NVMLError
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def __init__(self, cards: list[FakeCard], driver: str = "550.54.15", cuda: int = 12040,
                 init_error: int | None = None) -> None:
        self.cards = cards
        self.driver, self.cuda = driver, cuda
        self.init_error = init_error
        self.initialised = False
        self.calls: list[str] = []
        self._samples: dict[int, tuple[FakeCard, int]] = {}
        self._keep: list[object] = []
        self._tick = 0

    def __getattribute__(self, name: str):
        if name.startswith("nvml"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)

    def _fail(self, code: int):
        raise pynvml.NVMLError(code)

    # --- the library ---------------------------------------------------------------------------

    def nvmlInit(self):
        if self.init_error is not None:
            self._fail(self.init_error)
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.cards):
            self._fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.cards[i]

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h):
        return pynvml.c_nvmlMemory_t(total=h.total_mb * MiB, free=(h.total_mb - h.used_mb) * MiB, used=h.used_mb * MiB)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h.cc

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return h.pcie[0]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return h.pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return h.pcie[3]

    def nvmlDeviceGetPciInfo(self, h):
        info = pynvml.nvmlPciInfo_t()
        info.busId = h.bus.encode()
        return info

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(h.links):
            self._fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # past the card's last link
        return 1

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        if h.links[link] == "switch":
            return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        info = pynvml.nvmlPciInfo_t()
        # The far end's bus id comes with a 4-digit domain, the card's own with 8.
        info.busId = h.links[link].replace("00000000:", "0000:").encode()
        return info

    def nvmlDeviceGetMigMode(self, h):
        if isinstance(h, FakeMIG):
            self._fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        on = pynvml.NVML_DEVICE_MIG_ENABLE if h.migs else pynvml.NVML_DEVICE_MIG_DISABLE
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if h.migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j >= len(h.migs):
            self._fail(pynvml.NVML_ERROR_NOT_FOUND)
        return h.migs[j]

    def nvmlDeviceGetGpuInstanceId(self, m):
        return m.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, m):
        return m.compute_instance

    def nvmlDeviceGetUtilizationRates(self, h):
        return pynvml.c_nvmlUtilization_t(gpu=h.util, memory=0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.temp

    def nvmlDeviceGetPowerUsage(self, h):
        return h.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        if h.power_limit_mw is None:
            self._fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h.power_limit_mw

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        procs = getattr(h, "procs", [])
        return [SimpleNamespace(pid=pid, usedGpuMemory=mb * MiB) for pid, mb in procs]

    # --- GPM -----------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h):
        support = pynvml.c_nvmlGpmSupport_t()
        support.isSupportedDevice = 1 if h.gpm is not None else 0
        return support

    def nvmlGpmSampleAlloc(self):
        struct = pynvml.struct_c_nvmlGpmSample_t()
        self._keep.append(struct)
        return ctypes.pointer(struct)

    def nvmlGpmSampleGet(self, h, sample):
        self._tick += 1
        self._samples[ctypes.addressof(sample.contents)] = (h, self._tick)
        return sample

    def nvmlGpmMetricsGet(self, q):
        card1, t1 = self._samples[ctypes.addressof(q.sample1.contents)]
        card2, t2 = self._samples[ctypes.addressof(q.sample2.contents)]
        assert card1 is card2 and t1 < t2, "GPM metrics asked between samples of different cards, or backwards"
        for k in range(q.numMetrics):
            m = q.metrics[k]
            if m.metricId in card1.gpm:
                m.value, m.nvmlReturn = card1.gpm[m.metricId], pynvml.NVML_SUCCESS
            else:
                m.value, m.nvmlReturn = 0.0, pynvml.NVML_ERROR_NOT_SUPPORTED
        return q
