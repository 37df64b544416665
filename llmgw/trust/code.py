"""The join code: everything a new node needs to reach and trust the cluster, in one line.

base64url (no padding) of a small JSON object:

    {"v": 1, "cp": ["10.0.0.5:7443", …], "ca": "<sha256 of the CA's DER, hex>", "t": "<secret>"}

`cp` are the control planes' agent addresses, tried in turn. `ca` pins the
cluster CA before anything is sent: the node fetches the CA over TLS it
cannot yet verify, keeps it only if its fingerprint is this one, and then
sends the secret over TLS verified against it. So there is no
trust-on-first-use, and a machine that answers at one of those addresses
without the cluster's CA never sees the secret.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

import orjson

from llmgw.config import Address
from llmgw.trust.masterkey import TrustError

_VERSION = 1
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class JoinCode:
    control_planes: tuple[str, ...]
    ca_fingerprint: str
    secret: str

    def encode(self) -> str:
        doc = {"v": _VERSION, "cp": list(self.control_planes), "ca": self.ca_fingerprint, "t": self.secret}
        return base64.urlsafe_b64encode(orjson.dumps(doc)).rstrip(b"=").decode()


def decode_code(text: str) -> JoinCode:
    """The join code in `text`; TrustError with a sentence for anything else."""
    bad = ("that is not a join code: copy the whole code llmgw node add printed "
           "(one line, letters, digits, - and _)")
    text = "".join((text or "").split())
    if not text or not re.fullmatch(r"[A-Za-z0-9_\-]+", text):
        raise TrustError(bad)
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise TrustError(bad) from None
    if not isinstance(doc, dict):
        raise TrustError(bad)
    if doc.get("v") != _VERSION:
        raise TrustError(f"this join code is of version {doc.get('v')}, which this llmgw does not read; "
                         "install the llmgw the control plane runs")
    cps, fp, secret = doc.get("cp"), doc.get("ca"), doc.get("t")
    if (not isinstance(cps, list) or not cps or not all(isinstance(c, str) for c in cps)
            or not isinstance(fp, str) or not _FINGERPRINT.match(fp)
            or not isinstance(secret, str) or len(secret) < 32):
        raise TrustError(bad + "; part of it is missing")
    for cp in cps:
        try:
            addr = Address(cp)
        except ValueError:
            addr = None
        if addr is None or not addr.host or addr.port == 0:
            raise TrustError(f"the join code names {cp!r} as a control plane, which is not HOST:PORT")
    return JoinCode(tuple(cps), fp, secret)
