"""A file replaced whole or not at all: write beside it, sync, rename over it.

An agent or a control plane can be killed, or the machine lose power, in
the middle of writing its certificate, a shard's record or a weight file's
checked sum. Written in place, that leaves half a file, which the next
start reads as a corrupt certificate or a record it cannot adopt. Written
to a temporary file in the same directory (the same filesystem, so the
rename is atomic), synced, then renamed over the old one and the directory
synced, a reader finds the old file or the new one, never part of either.
"""

from __future__ import annotations

import os


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600,
                 owner: tuple[int, int] | None = None) -> None:
    """Replace `path` with `data`, with permissions `mode` (and `owner`'s uid, gid when given).

    The temporary file is `path` + ".tmp" (the weight cache knows that name
    as its own: agent/weights/cache.py), so one writer per path at a time;
    every caller owns its file. A write that fails midway removes it and
    leaves the old file as it was."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            # fchmod: the mode given to open was narrowed by the umask, and an
            # old temporary file keeps the mode it was made with.
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_directory(os.path.dirname(os.path.abspath(path)))


def _sync_directory(directory: str) -> None:
    """The rename made durable. Best effort: some filesystems cannot open or sync a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
