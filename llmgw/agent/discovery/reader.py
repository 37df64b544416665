"""The seam every GPU reader implements: NVML (nvml.py) and nvidia-smi (smi.py).

Both answer the same three questions, so everything above them (the
Discovery, `llmgw doctor`) is written once: what cards there are, how each
is doing now, and which processes hold how much of each card's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from llmgw.protocol import GPU, GPUSensor


class GPUUnavailable(Exception):
    """A reader that cannot be used here; str() says why, for Host.gpu_note.

    `driver_seen` says the reader found some of an NVIDIA driver (the NVML
    library loaded, nvidia-smi exists) before failing: a node with a
    driver and no GPUs has something to fix; one without has no GPUs.
    """

    def __init__(self, message: str, driver_seen: bool = False) -> None:
        super().__init__(message)
        self.driver_seen = driver_seen


@dataclass
class Inventory:
    gpus: list[GPU] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""  # the newest CUDA the driver runs, "12.4"


@dataclass
class GPUProcess:
    pid: int
    memory_mb: int


class GPUReader(Protocol):
    name: str  # "nvml" or "nvidia-smi"

    def inventory(self) -> Inventory:
        """Every card (a card in MIG mode as its instances); raises GPUUnavailable."""

    def sensors(self) -> list[GPUSensor]:
        """Each card's use now, by GPU index; [] when the driver stops answering."""

    def processes(self) -> dict[int, list[GPUProcess]]:
        """Per GPU index, the processes holding its memory; {} when the driver does not say."""

    def close(self) -> None: ...


def mig_index(card: int, device: int) -> int:
    """A MIG instance's GPU index: 1000 + 100 × card + device, as the original numbers them.

    Apart from whole cards' indexes so an instance is never taken for a
    card, and stable for as long as the instances are not re-made.
    """
    return 1000 + 100 * card + device


def cuda_version(number: int) -> str:
    """NVML's CUDA driver version, 12040, as people write it: "12.4"."""
    if number <= 0:
        return ""
    return f"{number // 1000}.{(number % 1000) // 10}"
