"""API key secrets: how they look, how they are hashed, what is shown.

A key is `sk-llmgw-` and 43 base62 characters (256 random bits). Only its
sha256 is stored: a key carries full entropy, so a slow password hash would
buy nothing and would cost every cache miss on the hot path. The first
characters after the prefix are kept to show, so people can tell their keys
apart in `llmgw keys list` without the store ever holding the secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "sk-llmgw-"
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_CHARS = 43  # 62**43 > 2**256
_KEY_RE = re.compile(r"^sk-llmgw-[0-9A-Za-z]{43}$")
SHOWN_CHARS = 6


def new_secret() -> str:
    number = int.from_bytes(secrets.token_bytes(32), "big")
    chars = []
    for _ in range(_BODY_CHARS):
        number, rest = divmod(number, 62)
        chars.append(_ALPHABET[rest])
    return KEY_PREFIX + "".join(chars)


def looks_like_key(text: str) -> bool:
    """True for a well-formed llmgw key; a malformed one never reaches the store."""
    return bool(_KEY_RE.match(text))


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def shown_prefix(secret: str) -> str:
    return secret[: len(KEY_PREFIX) + SHOWN_CHARS]


def new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"
