"""The admin token: the one secret that lets `llmgw ctl` act as an administrator.

It lives in a file only its owner can read (0600). A token file that others
can read is refused, not fixed silently: someone may already have read it,
and the person running the server should know and make a new one.
"""

from __future__ import annotations

import os
import secrets
import stat


class TokenError(Exception):
    pass


def ensure_token(path: str) -> str:
    """Read the admin token at `path`, making a new one (0600) if there is none."""
    try:
        return read_token(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)  # another process made it a moment ago
    except OSError as e:
        raise TokenError(f"cannot write the admin token to {path}: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def read_token(path: str) -> str:
    """The token in `path`; FileNotFoundError when there is no file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise TokenError(f"cannot read the admin token at {path}: {e.strerror}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(
            f"the admin token {path} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"treat it as leaked: delete it so a new one is made, or chmod 600 {path} if you are sure"
        )
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as e:
        raise TokenError(f"cannot read the admin token at {path}: {e.strerror}") from None
    if len(token) < 32:
        raise TokenError(f"the admin token in {path} is too short to be one; delete it so a new one is made")
    return token
