"""How much of each card's chip the work on it uses: SMs active, their occupancy, tensor cores, memory interface.

nvidia-smi's utilization.gpu cannot say: it is the share of time any
kernel ran, and a kernel keeping one SM of a hundred busy reads 100%. A
Quadro RTX 6000 decoding read 92% busy while its SMs had work 69% of the
time. Only the card's profiling counters say, and two things read them
without stopping the work: NVML's GPM, on Hopper and later (gpm.py), and
DCGM, which a site may run as dcgm-exporter (dcgm.py). GPM is preferred
per card; the exporter fills the cards GPM does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class Profile:
    """Percentages; -1 is not reported."""

    sm_active: float = -1.0
    sm_occupancy: float = -1.0
    tensor_active: float = -1.0
    dram_active: float = -1.0
    source: str = ""  # "gpm" or "dcgm"


class ProfileSource(Protocol):
    def read(self) -> dict[int, Profile]:
        """Each card's profile by GPU index; a card missing has none now."""


class Profiles:
    """GPM's cards first, then the exporter's for the rest."""

    def __init__(self, gpm: ProfileSource | None, dcgm: ProfileSource | None) -> None:
        self.gpm, self.dcgm = gpm, dcgm

    def read(self, indexes: set[int]) -> dict[int, Profile]:
        out = dict(self.gpm.read()) if self.gpm is not None else {}
        # The exporter is asked only for cards GPM left out: on an all-Hopper
        # node it is never asked, and costs nothing.
        if self.dcgm is not None and indexes - out.keys():
            for i, p in self.dcgm.read().items():
                out.setdefault(i, p)
        return {i: p for i, p in out.items() if i in indexes}
