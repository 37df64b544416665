"""Password hashing for people (the portal's sign-in), with scrypt from the standard library.

scrypt is memory-hard, so a stolen store costs an attacker real hardware per
guess; n=2**14, r=8 is about 50 ms and 16 MiB a check on one core here,
which a sign-in can afford and a brute force cannot.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_N, _R, _P = 2**14, 8, 1


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
