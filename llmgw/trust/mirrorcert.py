"""A model mirror's own certificate, on a machine without a control plane's (`llmgw mirror add-peer`).

The key is made on the mirror's machine and stays there (`mirror_key`); the control plane signs a request for it
(ClusterTrust.sign_mirror); `add-peer` run again asks for a new certificate only when the one there no longer
fits (`mirror_certificate_fits`). `certificate_identity` says whom a certificate file names, which is how a mirror
knows its own (mirror/api.py lets `llmgw mirror` on its machine change what it keeps).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from llmgw.files import write_atomic
from llmgw.trust import pki
from llmgw.trust.masterkey import TrustError

# A certificate running out sooner than this is made again, as a control plane's own (authority.RENEW_BEFORE).
RENEW_BEFORE = dt.timedelta(days=30)


def certificate_identity(path: str) -> tuple[str, str] | None:
    """("mirror", name), ("control-plane", name) or ("node", id) from the certificate in `path`; None when it
    cannot be read or names none."""
    try:
        with open(path, "rb") as f:
            return pki.cert_identity(pki.load_cert(f.read()))
    except (OSError, TrustError):
        return None


def mirror_key(key_path: Path, name: str, own: Callable[[Path], None] = lambda _: None) -> tuple[bool, str]:
    """The mirror's key at `key_path`, made (0600, then `own` gives it to the mirror's user) when there is none:
    (whether it was made, a certificate request for it)."""
    if key_path.exists():
        key = pki.load_key(key_path.read_bytes())
        made = False
    else:
        key = pki.new_key()
        write_atomic(key_path, pki.key_pem(key), 0o600)
        own(key_path)
        made = True
    return made, pki.csr_pem(pki.make_csr(key, name))


def mirror_certificate_fits(pem: str, ca_pem: str, csr_pem: str, name: str, hosts: list[str]) -> bool:
    """Whether the certificate already on the mirror's machine will do: this CA's, for the key there, a mirror's
    of this name, naming every one of `hosts`, and good for more than RENEW_BEFORE."""
    if not pem or not ca_pem:
        return False
    try:
        cert, ca = pki.load_cert(pem), pki.load_cert(ca_pem)
        cert.verify_directly_issued_by(ca)
        requested = pki.check_csr(csr_pem).public_key()
    except (TrustError, ValueError, TypeError, InvalidSignature):
        return False
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*der) != requested.public_bytes(*der):
        return False
    if pki.cert_identity(cert) != ("mirror", name):
        return False
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    named = {str(v.value).lower() for v in sans}
    if any(str(h.value).lower() not in named for h in pki.host_names(hosts)):
        return False
    return cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE
