"""The garbage collector's settings for a process that serves requests, set once it has started.

A request frees what it made by reference counting as it ends: almost
nothing the router allocates is cyclic garbage. CPython's default counts
700 net allocations to a young collection, which 32 requests in flight
cross every few requests; each such collection walks every live object of
those requests and finds nothing, every tenth walks the middle generation
too, and now and then a full collection walks everything start-up made
(modules, classes, the configuration). Measured through `python3 build.py
bench overhead`'s loads (c32 and 64-token streams, 10 s, the gateway on one
core): 426 collections, 620 ms of them, three full ones of 42-62 ms each,
a pause every request in flight waited through. With start-up's objects
frozen and the young threshold at GEN0: one collection, 2 ms.

Cyclic garbage is still collected (an exception's traceback, a connection
torn down mid-answer); it waits for GEN0 net allocations instead of 700,
which is a few megabytes at most.
"""

from __future__ import annotations

import gc

GEN0 = 10_000


def settle() -> None:
    """Collect what start-up left, freeze what survives, and collect the young less often."""
    gc.collect()
    # Frozen objects are never walked again: the modules, the settings and
    # the router's long-lived parts stay for the process's life anyway.
    gc.freeze()
    gc.set_threshold(GEN0, 10, 10)
