"""A secret in a file only its owner may read (0600): the admin token, the master key.

Made once, never overwritten; a file others can read is refused, not fixed
silently: someone may already have read it, and whoever runs the server
should know. Both callers raise their own error type with these sentences.
"""

from __future__ import annotations

import os
import stat


def read_private(path: str, what: str, error: type[Exception], leaked: str) -> bytes:
    """The bytes of `path`, stripped; FileNotFoundError when there is no file.

    `what` names the secret in sentences ("the admin token"); `leaked` says
    what to do when others can read it."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"cannot read {what} at {path}: {e.strerror}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise error(f"{what} {path} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}); {leaked}")
    try:
        with open(path, "rb") as f:
            return f.read().strip()
    except OSError as e:
        raise error(f"cannot read {what} at {path}: {e.strerror}") from None


def create_private(path: str, data: bytes, what: str, error: type[Exception]) -> bool:
    """Write `data` to a new file at `path`, 0600; False when the file already exists
    (another process made it a moment ago: read that one)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as e:
        raise error(f"cannot write {what} to {path}: {e.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data + b"\n")
    return True
