"""The filesystems holding the directories the agent writes to.

Free space belongs to a filesystem, not to a directory: a cache directory
and a data directory on one disk are one Storage, or the control plane
would count the same free gigabytes twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

from llmgw.protocol import Storage


def existing(path: str) -> str:
    """The path, or its nearest parent that exists: a cache directory not made yet lands on its parent's disk."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def filesystems(paths: Iterable[str]) -> list[Storage]:
    """One Storage per filesystem, named by the first directory given on it, in the order given."""
    seen: dict[int, Storage] = {}
    for path in paths:
        if not path:
            continue
        there = existing(path)
        try:
            dev = os.stat(there).st_dev
            usage = psutil.disk_usage(there)
        except OSError:
            continue
        if dev in seen:
            continue
        seen[dev] = Storage(path=os.path.abspath(path), device=device_of(there),
                            total_bytes=usage.total, free_bytes=usage.free)
    return list(seen.values())


def refresh(storage: list[Storage]) -> list[Storage]:
    """The same filesystems with their free space now: cheap enough for every heartbeat (one statvfs each)."""
    out = []
    for s in storage:
        try:
            usage = psutil.disk_usage(existing(s.path))
        except OSError:
            continue
        out.append(Storage(path=s.path, device=s.device, total_bytes=usage.total, free_bytes=usage.free))
    return out


def device_of(path: str) -> str:
    """The device mounted where `path` lives (/dev/nvme0n1p2), "" when the mount table does not say."""
    best, device = "", ""
    try:
        parts = psutil.disk_partitions(all=True)
    except OSError:
        return ""
    real = os.path.realpath(path)
    for p in parts:
        mount = p.mountpoint.rstrip("/") or "/"
        inside = real == mount or real.startswith(mount + "/") or mount == "/"
        if inside and len(mount) >= len(best):
            best, device = mount, p.device
    return device
