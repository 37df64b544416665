"""Discovery: what a node has (CPUs, memory, disks, GPUs) and how it is doing, for the agent and `llmgw doctor`.

The one entry point is `Discovery` (node.py): `register_parts()` for
Register, `sample()` for each Heartbeat, `start()` for the memory
bandwidth measured in the background. Under it, one module an idea:

    host.py       OS, kernel, architecture, processor, memory (psutil, /proc)
    storage.py    the filesystems holding the agent's directories
    bandwidth.py  the memory's read rate, GB/s
    reader.py     the seam GPU readers implement; nvml.py (nvidia-ml-py) and smi.py (nvidia-smi)
    gpus.py       which reader, and why a node with a driver has no GPUs
    pcie.py       each card's PCIe link against the card's own
    profile.py    how much of each chip works: gpm.py (NVML's GPM) and dcgm.py (a dcgm-exporter)
    foreign.py    GPU memory held by processes that are not the agent's engines
"""

from llmgw.agent.discovery.bandwidth import measure as measure_bandwidth
from llmgw.agent.discovery.node import Discovery
from llmgw.agent.discovery.pcie import link_problem

__all__ = ["Discovery", "link_problem", "measure_bandwidth"]
