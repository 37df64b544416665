"""The Discovery: what this node has, for Register, and how it is doing, for each Heartbeat."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from llmgw.agent.discovery import bandwidth, storage
from llmgw.agent.discovery.dcgm import DCGMSource
from llmgw.agent.discovery.foreign import Ownership, foreign_memory
from llmgw.agent.discovery.gpm import GPMSource
from llmgw.agent.discovery.gpus import DRIVER_MARKER, GPUFinding, find_gpus
from llmgw.agent.discovery.host import MB, read_host
from llmgw.agent.discovery.nvml import NVMLReader
from llmgw.agent.discovery.profile import Profiles
from llmgw.config import DiscoverySettings
from llmgw.protocol import GPU, GPUSensor, Heartbeat, Host, Storage


def bandwidth_delay() -> float:
    """Seconds to wait before measuring: 10 to 120, at random, so agents started together measure apart."""
    return 10.0 + random.random() * 110.0  # noqa: S311 - a spread in time, not a secret


class Discovery:
    """What the node has and how it is doing, read through psutil, NVML or nvidia-smi, and a dcgm-exporter.

    register_parts() reads the GPUs once (the first call) and the rest
    each time; sample() is meant for every heartbeat (5 s): a few /proc
    reads, one statvfs per filesystem, and one NVML pass or nvidia-smi run.
    Both block (nvidia-smi, the exporter): from asyncio, call them through
    asyncio.to_thread.

    `directories` are where the agent writes (its weights cache first):
    their filesystems are the node's Storage. `measure_bandwidth` starts
    the memory measurement in the background at start(), after
    `bandwidth_delay_s` (10 to 120 s at random by default); tests that
    never look at the figure turn it off. `nvml_lib` is the seam for NVML
    (see nvml.py); `driver_marker` and `sysfs` let a test stand in for
    /proc/driver/nvidia and /sys/bus/pci/devices.
    """

    def __init__(self, settings: DiscoverySettings | None = None, directories: Iterable[str] = (), *,
                 measure_bandwidth: bool = True, bandwidth_delay_s: float | None = None,
                 measure_fn: Callable[[], float] = bandwidth.measure,
                 nvml_lib: Any | None = None, driver_marker: str = DRIVER_MARKER,
                 sysfs: str = "/sys/bus/pci/devices", dcgm_get: Callable[[str], str] | None = None) -> None:
        self.settings = settings or DiscoverySettings()
        self.directories = [d for d in directories if d]
        self._nvml_lib = nvml_lib
        self._driver_marker = driver_marker
        self._sysfs = sysfs
        self._dcgm_get = dcgm_get
        self._lock = threading.Lock()
        self._finding: GPUFinding | None = None
        self._profiles: Profiles | None = None
        self._storage: list[Storage] = []
        self._bandwidth = bandwidth.BackgroundMeasurement(
            bandwidth_delay() if bandwidth_delay_s is None else bandwidth_delay_s, measure_fn)
        self._measure = measure_bandwidth
        # psutil's cpu_percent is the use since its last call; the first call
        # has nothing before it and says 0, so it is made here, not in a heartbeat.
        psutil.cpu_percent(interval=None)

    # --- start and stop ------------------------------------------------------------------------

    def start(self) -> None:
        """Start what runs in the background: the memory bandwidth measurement."""
        if self._measure:
            self._bandwidth.start()

    def close(self) -> None:
        self._bandwidth.stop()
        with self._lock:
            if self._finding and self._finding.reader:
                self._finding.reader.close()

    @property
    def mem_bandwidth_gbs(self) -> float:
        """GB/s once measured, 0 before."""
        return self._bandwidth.gbs

    @property
    def gpu_reader(self) -> str:
        """"nvml", "nvidia-smi", or "" without GPUs."""
        finding = self._gpus()
        return finding.reader.name if finding.reader else ""

    # --- Register ------------------------------------------------------------------------------

    def _gpus(self) -> GPUFinding:
        with self._lock:
            if self._finding is None:
                self._finding = find_gpus(self.settings, self._nvml_lib, self._driver_marker, self._sysfs)
                self._profiles = self._profile_sources(self._finding)
            return self._finding

    def _profile_sources(self, finding: GPUFinding) -> Profiles | None:
        if not finding.inventory.gpus:
            return None
        gpm = GPMSource(finding.reader) if isinstance(finding.reader, NVMLReader) else None
        url = self.settings.dcgm_exporter.strip()
        dcgm = None
        if url.lower() != "off":
            dcgm = DCGMSource(url, self._dcgm_get) if self._dcgm_get else DCGMSource(url)
        return Profiles(gpm, dcgm)

    def register_parts(self) -> tuple[Host, list[GPU], list[Storage]]:
        """The Host, its GPUs (a card in MIG mode as its instances) and its Storage, for Register."""
        finding = self._gpus()
        host = read_host()
        host.nvidia_driver = finding.inventory.driver
        host.cuda_version = finding.inventory.cuda
        host.gpu_note = finding.note
        host.mem_bandwidth_gbs = self.mem_bandwidth_gbs
        self._storage = storage.filesystems(self.directories)
        return host, list(finding.inventory.gpus), list(self._storage)

    # --- Heartbeat -----------------------------------------------------------------------------

    def sample(self, engine_pids: Iterable[int] = ()) -> Heartbeat:
        """How the node is doing now; `engine_pids` are the agent's engines (each its process group's leader).

        The agent fills in `shards`. GPU memory not held by those engines
        is gpu_foreign_memory_mb, in the order register_parts() listed the GPUs.
        """
        mem = psutil.virtual_memory()
        hb = Heartbeat(
            at=time.time(),
            cpu_percent=psutil.cpu_percent(interval=None),
            load1=round(os.getloadavg()[0], 2),
            memory_used_mb=(mem.total - mem.available) // MB,
            memory_available_mb=mem.available // MB,
            mem_bandwidth_gbs=self.mem_bandwidth_gbs,
            storage=storage.refresh(self._storage or storage.filesystems(self.directories)),
        )
        finding = self._gpus()
        if finding.reader is None:
            return hb
        sensors = finding.reader.sensors()
        self._add_profiles(sensors)
        hb.gpus = sensors
        order = [g.index for g in finding.inventory.gpus]
        hb.gpu_foreign_memory_mb = foreign_memory(order, sensors, finding.reader.processes(), Ownership(engine_pids))
        return hb

    def _add_profiles(self, sensors: list[GPUSensor]) -> None:
        if self._profiles is None:
            return
        profiles = self._profiles.read({s.index for s in sensors})
        for s in sensors:
            p = profiles.get(s.index)
            if p is None:
                continue
            s.has_profile, s.profile_source = True, p.source
            s.sm_active_percent, s.sm_occupancy_percent = p.sm_active, p.sm_occupancy
            s.tensor_active_percent, s.dram_active_percent = p.tensor_active, p.dram_active
