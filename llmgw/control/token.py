"""The admin token: the one secret that lets `llmgw ctl` act as an administrator.

It lives in a file only its owner can read (0600). A token file that others
can read is refused, not fixed silently: someone may already have read it,
and the person running the server should know and make a new one.
"""

from __future__ import annotations

import secrets

from llmgw.control.privatefile import create_private, read_private


class TokenError(Exception):
    pass


def ensure_token(path: str) -> str:
    """Read the admin token at `path`, making a new one (0600) if there is none."""
    try:
        return read_token(path)
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    if not create_private(path, token.encode(), "the admin token", TokenError):
        return read_token(path)
    return token


def read_token(path: str) -> str:
    """The token in `path`; FileNotFoundError when there is no file."""
    token = read_private(path, "the admin token", TokenError,
                         f"treat it as leaked: delete it so a new one is made, or chmod 600 {path} if you are sure")
    try:
        text = token.decode()
    except UnicodeDecodeError:
        text = ""
    if len(text) < 32:
        raise TokenError(f"the admin token in {path} is too short to be one; delete it so a new one is made")
    return text
