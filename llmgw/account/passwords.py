"""Password hashing for people (the portal's sign-in), with scrypt from the standard library.

scrypt is memory-hard, so a stolen store costs an attacker real hardware per
guess; n=2**14, r=8 is about 50 ms and 16 MiB a check on one core here,
which a sign-in can afford and a brute force cannot.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from llmgw.errors import N_

_N, _R, _P = 2**14, 8, 1
MIN_LENGTH = 10


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    derived = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${base64.b64encode(salt).decode()}${base64.b64encode(derived).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, derived = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    candidate = hashlib.scrypt(
        password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
        dklen=len(base64.b64decode(derived)),
    )
    return hmac.compare_digest(candidate, base64.b64decode(derived))


def new_password() -> str:
    """A first administrator's password: 20 characters, easy to type from a screen."""
    alphabet = "abcdefghijkmnpqrstuvwxyzACDEFGHJKLMNPQRSTUVWXYZ23456789"
    return "".join(secrets.choice(alphabet) for _ in range(20))


@functools.cache
def dummy_hash() -> str:
    """A hash no password matches, checked when the e-mail is unknown: the refusal then
    costs the same scrypt as a wrong password, so its timing does not say who has an account."""
    return hash_password(secrets.token_urlsafe(32))


def check_password_strength(password: str, email: str) -> str | None:
    """Why a new password is refused, as a sentence to translate (N_), or None when it will do."""
    if len(password) < MIN_LENGTH:
        return N_("a password needs at least 10 characters")
    if password.strip().casefold() == email.strip().casefold():
        return N_("a password may not be your e-mail address")
    return None
