"""sha256 of weights, worked out in threads, and the sum kept beside a checked file.

Hashing 195 GB takes minutes of a core: it runs in threads, several files
at once, counting what it has read so a `checking` phase can be shown
(the original checked a set's files one at a time with nothing said, and a
replica read "fetching 100%" for eight minutes). Once a file is checked its
sum is kept beside it, so the next start of a shard reads a line, not the
file.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from llmgw.files import write_atomic

_CHUNK = 4 << 20


class Counter:
    """Bytes read so far, added to from several hashing threads."""

    def __init__(self, start: int = 0):
        self._lock = threading.Lock()
        self.value = start

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


def sha256_file(path: Path, counter: Counter | None = None, stop: threading.Event | None = None) -> str:
    """The file's sha256 as lowercase hex; blocking, for a thread."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError()
            digest.update(chunk)
            if counter is not None:
                counter.add(len(chunk))
    return digest.hexdigest()


async def sha256_many(
    paths: Iterable[Path],
    counter: Counter,
    at_once: int = 4,
    on_tick: Callable[[], None] | None = None,
    interval: float = 0.5,
) -> dict[Path, str]:
    """The sha256 of each path, `at_once` in threads together; on_tick is called every `interval` while they run."""
    gate = asyncio.Semaphore(at_once)
    stop = threading.Event()

    async def one(path: Path) -> tuple[Path, str]:
        async with gate:
            return path, await asyncio.to_thread(sha256_file, path, counter, stop)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(interval)
            if on_tick is not None:
                on_tick()

    tick = asyncio.create_task(ticker())
    try:
        return dict(await asyncio.gather(*(one(p) for p in paths)))
    finally:
        # A shard stopped while its weights are checked: the threads stop at
        # their next chunk rather than reading a hundred gigabytes for nobody.
        stop.set()
        tick.cancel()


def kept_path(file: Path) -> Path:
    """Where a checked file's sum is kept: beside it, hidden, so no engine reading its directory takes it
    for weights."""
    return file.with_name(f".{file.name}.sha256")


def read_kept(file: Path) -> str:
    """The sum kept for a file, or "" when none is, or the file's size has changed since it was checked."""
    try:
        words = kept_path(file).read_text().split()
        size = file.stat().st_size
    except OSError:
        return ""
    if len(words) != 2 or words[1] != str(size):
        return ""
    return words[0].lower()


def keep(file: Path, digest: str) -> None:
    """Keep `digest` as the checked sum of `file`, with its size, written whole or not at all."""
    write_atomic(kept_path(file), f"{digest.lower()} {file.stat().st_size}\n".encode(), 0o644)
