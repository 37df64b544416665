"""The bearer token a SCIM provider sends: made by `llmgw ctl auth scim-token`, or read from auth.scim.token_file.

The store keeps only the made token's sha256 (in sealed_secrets, under
"scim/token-digest", with when it was made): a digest needs no sealing, and
a copy of the store cannot be used to provision people. A presented token
is hashed and compared in constant time. The expected digest is kept for a
few seconds, so a provider's burst of requests costs no store read each,
while a token made again works (and the old one stops) within that time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable

from llmgw.auth.secrets import SecretError, Secrets
from llmgw.config import SCIMSettings
from llmgw.store import SecretsStore

log = logging.getLogger("llmgw.auth.scim")

DIGEST_NAME = "scim/token-digest"
PREFIX = "scim_"
KEPT_S = 3.0  # how long an expected digest is trusted before it is read again


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


async def make_token(store: SecretsStore) -> str:
    """A new token for the provider, replacing any made before; only its digest is kept."""
    token = PREFIX + secrets.token_urlsafe(32)
    made = time.time()
    await store.put_sealed_secret(DIGEST_NAME, f"{made!r} {_digest(token).hex()}".encode(), made)
    return token


async def _stored(store: SecretsStore) -> tuple[float, bytes] | None:
    raw = await store.sealed_secret(DIGEST_NAME)
    if raw is None:
        return None
    made, _, digest = raw.decode("ascii", "replace").partition(" ")
    try:
        return float(made), bytes.fromhex(digest)
    except ValueError:
        log.error("the stored SCIM token digest cannot be read; make a new token with llmgw ctl auth scim-token")
        return None


async def token_made(store: SecretsStore) -> float | None:
    """When the token `make_token` made was made (epoch seconds); None when none was."""
    stored = await _stored(store)
    return None if stored is None else stored[0]


class TokenCheck:
    """Whether a presented bearer token is the provider's: auth.scim.token_file's, else the one made."""

    def __init__(self, store: SecretsStore, secrets_: Secrets, settings: Callable[[], SCIMSettings], *,
                 kept_s: float = KEPT_S, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.secrets = secrets_
        self.settings = settings
        self.kept_s = kept_s
        self.clock = clock
        self._expected: tuple[str, float, bytes | None] | None = None  # (token_file, read at, digest)

    async def _expected_digest(self) -> bytes | None:
        ref = self.settings().token_file
        now = self.clock()
        if self._expected is not None and self._expected[0] == ref and now - self._expected[1] < self.kept_s:
            return self._expected[2]
        digest: bytes | None
        if ref:
            try:
                digest = _digest(await self.secrets.read(ref, "auth.scim.token_file"))
            except SecretError as e:
                log.error("SCIM requests are refused: %s", e)
                digest = None
        else:
            stored = await _stored(self.store)
            digest = None if stored is None else stored[1]
        self._expected = (ref, now, digest)
        return digest

    async def accepts(self, presented: str) -> bool:
        expected = await self._expected_digest()
        # Hashed first, so the comparison's time says nothing of the token, and in constant time.
        return expected is not None and bool(presented) and hmac.compare_digest(_digest(presented), expected)
