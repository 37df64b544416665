"""Replacing the running program: the new one renamed into place at once, the old one kept as llmgw.previous.

The running process keeps its own file open (its inode), so renaming over
it is safe while it runs; the service manager starts the new one at the
next start. The previous program is kept beside it (a hard link, so there
is never a moment with neither): what a failed upgrade and `--rollback`
put back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llmgw.release.program import ReleaseError, sha256_of

PREVIOUS_SUFFIX = ".previous"


def previous_of(target: Path) -> Path:
    return target.with_name(target.name + PREVIOUS_SUFFIX)


def _keep(source: Path, kept: Path) -> None:
    partial = kept.with_name(kept.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:  # another filesystem, or one without hard links
        shutil.copy2(source, partial)
    os.replace(partial, kept)


def install_program(target: Path, new: Path, sha256: str) -> None:
    """Put `new` (checked against `sha256`) in place of `target`, keeping `target` as target.previous."""
    incoming = target.with_name(target.name + ".incoming")
    shutil.copyfile(new, incoming)
    if sha256_of(incoming) != sha256:
        incoming.unlink()
        raise ReleaseError(f"the program fetched for {target} does not match its sha256 {sha256[:16]}…; "
                           "nothing was replaced: fetch it again")
    incoming.chmod(0o755)
    with open(incoming, "rb") as f:
        os.fsync(f.fileno())
    if target.exists():
        _keep(target, previous_of(target))
    os.replace(incoming, target)
    _sync_dir(target.parent)


def restore_previous(target: Path) -> bool:
    """Put target.previous back in place of `target`; False when there is none (nothing was changed)."""
    previous = previous_of(target)
    if not previous.is_file():
        return False
    back = target.with_name(target.name + ".restoring")
    _keep(previous, back)
    os.replace(back, target)
    _sync_dir(target.parent)
    return True


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
