"""The master key: what seals the cluster's secrets before they go into the store.

A file of 32 random bytes (base64) in the control plane's data directory,
readable by its owner only (0600), made at the first start that needs it.
The store keeps only what was sealed with it (AES-256-GCM), so a copy of the
store — a backup, a replica, a dump sent with a bug report — does not carry
the cluster CA's key. Every control plane of one cluster needs the same
file: copy it from the first to the others' data directories.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from llmgw.config import MASTER_KEY_FILE
from llmgw.errors import ExpectedError
from llmgw.privatefile import create_private, read_private

FILE_NAME = MASTER_KEY_FILE
_VERSION = b"\x01"  # the first byte of what seal() makes, so the format can change
_NONCE = 12


class TrustError(ExpectedError):
    """Why trust could not be set up or given, as a sentence for people."""


class MasterKey:
    def __init__(self, key: bytes, path: str = ""):
        if len(key) != 32:
            raise TrustError(f"the master key{' in ' + path if path else ''} is not 32 bytes; "
                             "it is not one llmgw made")
        self._aead = AESGCM(key)
        # For derive(): a separate key, so a derived value says nothing of the sealing one.
        self._derive = hmac.new(key, b"llmgw-derive", hashlib.sha256).digest()
        self.path = path

    def derive(self, purpose: str) -> bytes:
        """32 bytes every control plane holding this master key computes alike, for `purpose`
        (the engines' API key): a shared secret with nothing more to store."""
        return hmac.new(self._derive, purpose.encode(), hashlib.sha256).digest()

    def seal(self, plaintext: bytes, purpose: str) -> bytes:
        """`plaintext` sealed; `purpose` (e.g. "cluster-ca-key") is bound to it,
        so a sealed value cannot be passed off as another kind of secret."""
        nonce = secrets.token_bytes(_NONCE)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext, purpose.encode())

    def unseal(self, sealed: bytes, purpose: str) -> bytes:
        """What seal() sealed; TrustError when this key did not seal it."""
        if sealed[:1] != _VERSION or len(sealed) < 1 + _NONCE + 16:
            raise TrustError(f"the sealed {purpose} is not in a form this llmgw knows")
        try:
            return self._aead.decrypt(sealed[1:1 + _NONCE], sealed[1 + _NONCE:], purpose.encode())
        except InvalidTag:
            raise TrustError(f"the {purpose} in the store was sealed under another master key") from None


def read_master_key(path: str) -> MasterKey:
    """The master key in `path`; FileNotFoundError when there is none.

    A file others can read is refused, as the admin token is: someone may
    have copied it, and whoever runs the server should know."""
    text = read_private(path, "the master key", TrustError,
                        f"chmod 600 {path}, and if someone else may have read it, treat the cluster's sealed "
                        "secrets as leaked")
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise TrustError(f"the master key in {path} is not base64; it is not a file llmgw made") from None
    return MasterKey(key, path)


def ensure_master_key(path: str) -> MasterKey:
    """The master key in `path`, made (0600) when there is none."""
    try:
        return read_master_key(path)
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    if not create_private(path, base64.b64encode(key), "the master key", TrustError):
        return read_master_key(path)  # another process made it a moment ago
    return MasterKey(key, path)
