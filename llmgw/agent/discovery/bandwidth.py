"""How fast this machine reads its memory, in GB/s.

On CPUs that is what decides how fast a model answers: every token reads
all the weights it uses once, so a node reading 40 GB/s writes a 4 GB
model's tokens about ten times a second, whatever its core count. Every
CPU reads a share of one buffer at once, so a VM sharing its host's
memory gets its share, which is the figure that matters to it.

Two readers, the same measurement: numpy's sum where numpy is installed,
and otherwise the C library's memchr through ctypes, looking for a byte
the buffer does not hold. Both read at memory speed and let go of the GIL
while they read, so threads read in parallel (measured on a 2-core EPYC
VM: numpy 33 GB/s, memchr 29 GB/s; bytes.count, which holds the GIL, 2.8).
numpy is not a dependency of the product, only of its tests; memchr is in
every Linux's C library, so an agent installed alone measures too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
import time
from collections.abc import Callable

# The most read: enough to be past any cache and to time well, little
# enough to take a fraction of a second.
MOST = 2 << 30
# The least, whatever the caches say: smaller, the figure is a cache's.
LEAST = 256 << 20
PASSES = 4


def last_cache_bytes(root: str = "/sys/devices/system/cpu") -> int:
    """The largest cache any CPU reports (its last level), 0 when /sys does not say."""
    most = 0
    for path in glob.glob(os.path.join(root, "cpu*", "cache", "index*", "size")):
        try:
            with open(path) as f:
                most = max(most, parse_cache_size(f.read()))
        except OSError:
            continue
    return most


def parse_cache_size(text: str) -> int:
    """"32768K" as sysfs writes it, in bytes; 0 for what is not a size."""
    text = text.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text.rstrip("KkMmGg")
    return int(digits) * mult if digits.isdigit() else 0


def mem_available(path: str = "/proc/meminfo") -> int:
    """MemAvailable in bytes, 0 when unknown."""
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "MemAvailable:":
                    return int(fields[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def buffer_size(cache_bytes: int, available: int) -> int:
    """How much to read: at least 8x the last cache, never over a quarter of what is free; 0 is "not now".

    A node already holding models must not be pushed into swap by a
    measurement. Without room for a buffer well past the cache there is no
    honest figure to give, and none is given.
    """
    size = MOST
    if available > 0:
        size = min(size, available // 4)
    if size < max(LEAST, 8 * cache_bytes):
        return 0
    return size


def why_not(cache_bytes: int, available: int) -> str:
    """Why `buffer_size` gave 0, as a person reads it."""
    needed = max(LEAST, 8 * cache_bytes)
    if needed > MOST:
        return (f"the last cache ({cache_bytes >> 20} MB) needs a read of {needed / (1 << 30):.1f} GB to get past "
                f"it, more than the {MOST >> 30} GB read here")
    return f"too little free memory ({available >> 20} MB; a read of {needed >> 20} MB takes a quarter at most)"


def measure(size: int | None = None, workers: int | None = None) -> float:
    """The memory's read rate in GB/s, the best of a few passes; 0 when there is too little free memory."""
    if size is None:
        size = buffer_size(last_cache_bytes(), mem_available())
    if size <= 0:
        return 0.0
    workers = workers or usable_cpus()
    try:
        reader = _numpy_reader(size, workers)
    except ImportError:
        reader = _memchr_reader(size, workers)
    try:
        return _best_of(reader, size, workers)
    finally:
        del reader


def usable_cpus() -> int:
    """The CPUs this process may run on: a container or a taskset gets fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def reader_name() -> str:
    """Which reader `measure` uses here, for a person reading the figure."""
    try:
        import numpy  # noqa: F401
        return "numpy"
    except ImportError:
        return "memchr"


def _best_of(parts: list[Callable[[], object]], size: int, workers: int) -> float:
    best = 0.0
    for _ in range(PASSES):
        threads = [threading.Thread(target=part, daemon=True) for part in parts]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - start
        if took > 0:
            best = max(best, size / took / 1e9)
    return best


def _numpy_reader(size: int, workers: int) -> list[Callable[[], object]]:
    import numpy as np

    # Written, not just allocated: untouched pages all map the one zero
    # page, which sits in the cache and reads impossibly fast.
    buf = np.ones(size // 8, dtype=np.uint64)
    return [chunk.sum for chunk in np.array_split(buf, workers)]


def _memchr_reader(size: int, workers: int) -> list[Callable[[], object]]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    memchr = libc.memchr
    memchr.restype = ctypes.c_void_p
    memchr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    buf = (ctypes.c_char * size)()
    # Filled with a byte that is never looked for, so memchr reads to the
    # end; and, as above, so the pages are real.
    ctypes.memset(buf, 0x5A, size)
    base = ctypes.addressof(buf)
    step = size // workers
    parts: list[Callable[[], object]] = []
    for w in range(workers):
        lo = base + w * step
        n = step if w < workers - 1 else size - w * step

        def read(lo: int = lo, n: int = n, keep: object = buf) -> object:  # keep: the buffer lives while it is read
            return memchr(lo, 0, n)

        parts.append(read)
    return parts


class BackgroundMeasurement:
    """The figure, measured once in a thread of its own after a delay.

    In the background because reading two gigabytes must not hold up an
    agent reaching its control plane; after a delay chosen at random so
    that VMs on one host started together do not measure each other (the
    original measured a third less that way). Measured again every hour
    only while there was no room to measure at all.
    """

    def __init__(self, delay_s: float, measure_fn: Callable[[], float] = measure,
                 retry_s: float = 3600.0, on_measured: Callable[[float], None] | None = None) -> None:
        self._delay = delay_s
        self._measure = measure_fn
        self._retry = retry_s
        self._on_measured = on_measured
        self._value = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def gbs(self) -> float:
        """GB/s, 0 until measured."""
        return self._value

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="llmgw-bandwidth", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once measured (tests, and `llmgw doctor`'s impatient reader)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._value > 0

    def _run(self) -> None:
        if self._stop.wait(self._delay):
            return
        while not self._stop.is_set():
            value = self._measure()
            if value > 0:
                self._value = round(value, 1)
                if self._on_measured:
                    self._on_measured(self._value)
                return
            if self._stop.wait(self._retry):
                return
