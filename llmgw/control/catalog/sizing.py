"""What a replica keeps when its model's size was not known as it was added: sized from the weights' length.

`llmgw ctl model serve hf:…` (and `build.py run --model hf:…`) may not learn
how large the file is before it is added: the hub unreachable, or not asked.
The guess it keeps (4 GB, and up to four cores) held both cores of a
two-core machine, so a small model could not be placed beside it (issue 11).
Such a profile says `size_from_weights`; once its node has the file and
reports its length, each replica keeps what that length needs, and so does
every replica placed after.
"""

from __future__ import annotations

import math

from llmgw.control.catalog.spec import GB, MB, Profile

CORE_PER = 512 * MB
"""A core for each 512 MB of weights: measured on llama.cpp, more threads than that bring a small model nothing."""


def from_length(length: int, cores_at_most: int = 0) -> tuple[int, int]:
    """(cores, memory in MB) for weights of `length` bytes.

    Memory: the file, and a quarter more (at least 1 GB more) for its KV
    cache and the engine itself, as `ctl model serve` keeps for a local file.
    Cores: one for each 512 MB, at least one, and never more than the profile
    asked for (`cores_at_most`; 0 keeps none, as the profile's 0 does): the
    engine is started with the profile's threads.
    """
    cores = min(max(1, math.ceil(length / CORE_PER)), max(cores_at_most, 0))
    memory_mb = math.ceil((length + max(length // 4, GB)) / MB)
    return cores, memory_mb


def sized(profile: Profile, length: int) -> tuple[int, int] | None:
    """(cores, memory in MB) a replica on `profile` keeps for weights of `length`; None when it keeps the profile's."""
    if not profile.size_from_weights or length <= 0 or profile.gpus is not None:
        return None
    return from_length(length, profile.cpu_cores)
