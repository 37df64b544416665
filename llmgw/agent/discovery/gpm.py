"""GPM, NVML's own profiling counters, on the cards that have them (Hopper and later).

Each read takes a sample per card and works out the metrics against the
one before, so the first read after start has nothing to say and NVML
stays initialised between reads (the NVMLReader keeps it so). It goes
through the same `lib` seam as nvml.py: the tests hand in an object with
the functions and use pynvml's real ctypes structures.
"""

from __future__ import annotations

import threading
from typing import Any

from llmgw.agent.discovery.nvml import NVMLReader
from llmgw.agent.discovery.profile import Profile

# (NVML_GPM_METRIC_* id, the field it fills); the ids are NVML's header's.
METRICS = (
    (2, "sm_active"),  # NVML_GPM_METRIC_SM_UTIL
    (3, "sm_occupancy"),  # NVML_GPM_METRIC_SM_OCCUPANCY
    (5, "tensor_active"),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    (10, "dram_active"),  # NVML_GPM_METRIC_DRAM_BW_UTIL
)


class GPMSource:
    def __init__(self, nvml: NVMLReader) -> None:
        self._nvml = nvml
        self._lib: Any = nvml.lib
        self._lock = threading.Lock()
        self._cards: dict[int, list[Any]] | None = None  # index -> [handle, previous, current, have_previous]
        self._failed = False

    def _open(self) -> bool:
        lib = self._lib
        self._cards = {}
        try:
            for i, h in self._nvml.handles():
                try:
                    if not lib.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                        continue
                    self._cards[i] = [h, lib.nvmlGpmSampleAlloc(), lib.nvmlGpmSampleAlloc(), False]
                except (lib.NVMLError, AttributeError):
                    continue  # an older card, or an NVML from before GPM
        except Exception:  # noqa: BLE001 - NVML gone; this reader then never tries again
            self._cards = {}
        return bool(self._cards)

    def read(self) -> dict[int, Profile]:
        with self._lock:
            if self._failed:
                return {}
            if self._cards is None and not self._open():
                self._failed = True
                return {}
            lib = self._lib
            out: dict[int, Profile] = {}
            for i, card in (self._cards or {}).items():
                h, prev, cur, have_prev = card
                try:
                    lib.nvmlGpmSampleGet(h, cur)
                except lib.NVMLError:
                    # A card put in MIG mode, or gone: no sample, and the next
                    # must not be measured against an old one.
                    card[3] = False
                    continue
                if have_prev:
                    p = self._between(prev, cur)
                    if p is not None:
                        out[i] = p
                card[1], card[2], card[3] = cur, prev, True
            return out

    def _between(self, earlier: Any, later: Any) -> Profile | None:
        lib = self._lib
        q = lib.c_nvmlGpmMetricsGet_t()
        q.version = lib.NVML_GPM_METRICS_GET_VERSION
        q.numMetrics = len(METRICS)
        q.sample1, q.sample2 = earlier, later
        for k, (metric, _) in enumerate(METRICS):
            q.metrics[k].metricId = metric
        try:
            lib.nvmlGpmMetricsGet(q)
        except lib.NVMLError:
            return None
        p = Profile(source="gpm")
        for k, (_, name) in enumerate(METRICS):
            m = q.metrics[k]
            if m.nvmlReturn == 0 and m.value >= 0:
                setattr(p, name, round(float(m.value), 2))
        return p
