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


def key_flaw(text: str) -> str | None:
    """What is wrong with a presented key, as a sentence, or None when it is well-formed.

    "They start sk-llmgw-" was said to every malformed key, including one that
    did start so but was cut short or carried a stray character, which left
    the person staring at a prefix that was right (issue 25). The sentence
    names the flaw without repeating the key: at most its first few
    characters when they are another service's prefix, or the shown prefix
    a person pasted for the key."""
    if looks_like_key(text):
        return None
    if text[:7].lower() == "bearer ":
        return "the key starts with a second \"Bearer \": send Authorization: Bearer sk-llmgw-… with Bearer once"
    if text[:1] in ("'", '"') or text[-1:] in ("'", '"'):
        return "the key is in quotes: send it without them, as Authorization: Bearer sk-llmgw-…"
    if not text.startswith(KEY_PREFIX):
        lead = re.match(r"^[A-Za-z]{1,6}-(?:[A-Za-z]{1,8}-)?", text)
        if lead and text.lower().startswith(KEY_PREFIX):
            return f"the key's prefix is {lead.group(0)}; llmgw keys start {KEY_PREFIX}, in small letters"
        if lead:
            return (f"that is not an llmgw API key: it starts {lead.group(0)}, another service's key perhaps; "
                    f"llmgw keys start {KEY_PREFIX}")
        return f"that is not an llmgw API key; they start {KEY_PREFIX}"
    body = text[len(KEY_PREFIX):]
    if body.endswith(("…", "...")) and len(body.rstrip(".…")) <= SHOWN_CHARS:
        return ("that is a key's shown prefix, as llmgw keys list prints it, not the key: a key is printed once, "
                "when it is made; make a new one if it was not kept")
    odd = sorted({c for c in body if c not in _ALPHABET})
    if odd:
        said = ", ".join("a space" if c == " " else "a line break" if c in "\r\n" else repr(c) for c in odd[:5])
        return (f"the key has characters an llmgw key never has ({said}); it is {KEY_PREFIX} and "
                f"{_BODY_CHARS} letters and digits: copy it again, whole")
    if len(body) < _BODY_CHARS:
        return (f"the key is too short: {KEY_PREFIX} is followed by {len(body)} letters and digits where a key has "
                f"{_BODY_CHARS}; copy it again, whole")
    return (f"the key is too long: {KEY_PREFIX} is followed by {len(body)} letters and digits where a key has "
            f"{_BODY_CHARS}; something was pasted with it")


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def shown_prefix(secret: str) -> str:
    return secret[: len(KEY_PREFIX) + SHOWN_CHARS]


def new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"
