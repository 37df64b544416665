"""The admin token: the one secret that lets `llmgw ctl` act as an administrator.

It lives in a file only its owner can read (0600). A token file that others
can read is refused, not fixed silently: someone may already have read it,
and the person running the server should know and make a new one.

A token names its holder before a "~" (`ada~Xk3…`, set with `server init
--token-holder`, "admin" when not): the audit log records what the admin API
was shown, and a token is all it is shown, so its holder is who acted. The
name is part of the token rather than a second line so that the file stays
one line that `$(cat admin-token)` can present. A token without "~", as
older versions made, is held by "admin".
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from llmgw.errors import ExpectedError
from llmgw.privatefile import create_private, read_private

DEFAULT_HOLDER = "admin"
# A name for the audit log: a person's login or e-mail, never text that could pass for a second entry.
_HOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


class TokenError(ExpectedError):
    pass


@dataclass(frozen=True)
class AdminToken:
    secret: str = field(repr=False)
    holder: str = DEFAULT_HOLDER


def check_holder(name: str) -> str:
    """`name` when it can name a token's holder; TokenError with what is allowed when not."""
    if not _HOLDER.fullmatch(name):
        raise TokenError(f"{name!r} cannot name the admin token's holder: use up to 64 letters, digits and "
                         "._@+- (a login name or an e-mail address)")
    return name


def ensure_token(path: str, holder: str = DEFAULT_HOLDER) -> AdminToken:
    """The admin token at `path`, making a new one (0600) held by `holder` if there is none."""
    check_holder(holder)
    try:
        return read_admin_token(path)
    except FileNotFoundError:
        pass
    token = f"{holder}~{secrets.token_urlsafe(32)}"  # token_urlsafe never writes "~"
    if not create_private(path, token.encode(), "the admin token", TokenError):
        return read_admin_token(path)
    return AdminToken(token, holder)


def read_admin_token(path: str) -> AdminToken:
    """The token in `path` and its holder; FileNotFoundError when there is no file."""
    raw = read_private(path, "the admin token", TokenError,
                       f"treat it as leaked: delete it so a new one is made, or chmod 600 {path} if you are sure")
    try:
        secret = raw.decode()
    except UnicodeDecodeError:
        secret = ""
    if len(secret) < 32 or any(c.isspace() for c in secret):
        raise TokenError(f"the admin token in {path} is not one llmgw made; delete it so a new one is made")
    holder, mark, _ = secret.partition("~")
    if not mark:
        return AdminToken(secret, DEFAULT_HOLDER)
    try:
        return AdminToken(secret, check_holder(holder))
    except TokenError as e:
        raise TokenError(f"{path}: {e}") from None


def read_token(path: str) -> str:
    """The token in `path`, as `llmgw ctl` presents it; FileNotFoundError when there is no file."""
    return read_admin_token(path).secret
