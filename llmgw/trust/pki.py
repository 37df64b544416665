"""Certificates of the cluster: its CA, control planes' server certificates, nodes' client certificates.

EC P-256 with ECDSA-SHA256 throughout: what OpenSSL, and so Python's ssl
module, takes for TLS server and client authentication on every platform
llmgw runs on, with keys made in a millisecond.

Who a certificate is for is said in a URI subject alternative name,
`urn:llmgw:node:<id>`, `urn:llmgw:control-plane:<name>` or
`urn:llmgw:mirror:<name>`, and in its extended key usage: a node's
certificate is for TLS clients only, so OpenSSL refuses it as a server's and
a node cannot pose as a control plane to another node. A model mirror on a
machine of its own (`llmgw mirror add-peer`) has one for both ends, since it
serves the nodes and reads the other mirror; its kind is its own, so no
control plane or node takes it for one of theirs (trust/agentport.py,
control/exchange.py, mirror/api.py). The common name repeats the id for
people reading it with openssl x509.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.trust.masterkey import TrustError

NODE_URI = "urn:llmgw:node:"
CONTROL_PLANE_URI = "urn:llmgw:control-plane:"
MIRROR_URI = "urn:llmgw:mirror:"
ORGANIZATION = "llmgw cluster"

CA_LIFETIME = dt.timedelta(days=20 * 365)
# Nodes renew by joining again; five years outlasts most machines' service.
NODE_LIFETIME = dt.timedelta(days=5 * 365)
# A control plane makes its own at every start and again a month before
# this runs out, so a year only bounds what a stolen copy is good for.
SERVER_LIFETIME = dt.timedelta(days=365)
# A mirror's is renewed by running `llmgw mirror add-peer` again, by hand, as
# a node's by joining again: the same five years.
MIRROR_LIFETIME = NODE_LIFETIME
# A node whose clock is a few minutes behind the control plane's must not
# find its new certificate "not yet valid".
BACKDATE = dt.timedelta(minutes=10)

_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_\-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_\-]{0,62}))*\.?$")


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    """A key as key_pem wrote one of new_key's: the cluster CA's."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        # llmgw makes every key it keeps with new_key; another kind is one it did not write.
        raise TrustError(f"the key is {type(key).__name__}, not the EC P-256 key llmgw makes")
    return key


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def load_cert(pem: str | bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.encode() if isinstance(pem, str) else pem)
    except ValueError as e:
        raise TrustError(f"that is not a PEM certificate: {e}") from None


def fingerprint(cert: x509.Certificate) -> str:
    """The sha256 of the certificate's DER, in hex: what a join code pins."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common[:64])])


def make_ca(cluster: str = "llmgw") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = new_key()
    now = _now()
    name = _name(f"{cluster} cluster CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(now + CA_LIFETIME)
        # path_length 0: it signs control planes and nodes, never another CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes,
          public_key: CertificatePublicKeyTypes, common: str, sans: list[x509.GeneralName],
          usages: list[x509.ObjectIdentifier], lifetime: dt.timedelta) -> x509.Certificate:
    now = _now()
    not_after = min(now + lifetime, ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(_name(common)).issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def host_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """Subject alternative names for `hosts`: IP addresses as such, names that
    are valid host names as DNS names, the rest (and repeats) left out."""
    out: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in hosts:
        host = (host or "").strip().strip("[]")
        if not host or host.lower() in seen:
            continue
        seen.add(host.lower())
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host.split("%")[0])))
            continue
        except ValueError:
            pass
        if _HOST.match(host) and not host.replace(".", "").isdigit():
            out.append(x509.DNSName(host.rstrip(".")))
    return out


def sign_server(ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes,
                public_key: CertificatePublicKeyTypes, name: str, hosts: Iterable[str]) -> x509.Certificate:
    """A control plane's certificate for its agent port. Client use too: a
    standby dials the leader's agent port with it."""
    sans = [x509.UniformResourceIdentifier(CONTROL_PLANE_URI + name), *host_names(hosts)]
    return _leaf(ca_cert, ca_key, public_key, name, sans,
                 [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], SERVER_LIFETIME)


def make_csr(key: CertificateIssuerPrivateKeyTypes, name: str) -> x509.CertificateSigningRequest:
    """What a node sends to join: its public key, signed by its private key,
    which stays on the node. The name is only a suggestion."""
    return (x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (name or "node")[:64])]))
            .sign(key, hashes.SHA256()))


def csr_pem(csr: x509.CertificateSigningRequest) -> str:
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def check_csr(pem: str) -> x509.CertificateSigningRequest:
    """The node's CSR, refused when it is not one, its signature does not
    hold (whoever sent it does not have the key), or its key is weak."""
    try:
        csr = x509.load_pem_x509_csr(pem.encode())
    except ValueError:
        raise TrustError("the certificate request is not a PEM CSR") from None
    try:
        valid = csr.is_signature_valid
    except (InvalidSignature, ValueError):
        valid = False
    if not valid:
        raise TrustError("the certificate request's signature does not match its key")
    key = csr.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in ("secp256r1", "secp384r1"):
            raise TrustError(f"the certificate request's key is on {key.curve.name}; use P-256 or P-384")
    elif isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise TrustError(f"the certificate request's RSA key has {key.key_size} bits; use 2048 or more")
    elif not isinstance(key, ed25519.Ed25519PublicKey):
        raise TrustError("the certificate request's key is of a kind llmgw does not sign; use EC P-256")
    return csr


def sign_node(ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes, csr: x509.CertificateSigningRequest,
              node_id: str) -> x509.Certificate:
    """A node's client certificate. Only the CSR's public key is taken: who
    the node is (its id) is the control plane's to say, not the request's."""
    return _leaf(ca_cert, ca_key, csr.public_key(), node_id, [x509.UniformResourceIdentifier(NODE_URI + node_id)],
                 [ExtendedKeyUsageOID.CLIENT_AUTH], NODE_LIFETIME)


def sign_mirror(ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes,
                csr: x509.CertificateSigningRequest, name: str, hosts: Iterable[str]) -> x509.Certificate:
    """A model mirror's certificate, for a mirror on a machine without a control plane's: server use (the nodes,
    the control planes and the other mirror dial it) and client use (it reads the other mirror), naming the
    machine's addresses. Only the CSR's public key is taken: its key was made on the mirror's machine and never
    left it."""
    sans = [x509.UniformResourceIdentifier(MIRROR_URI + name), *host_names(hosts)]
    return _leaf(ca_cert, ca_key, csr.public_key(), name, sans,
                 [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], MIRROR_LIFETIME)


KINDS = (("node", NODE_URI), ("control-plane", CONTROL_PLANE_URI), ("mirror", MIRROR_URI))


def identity(peercert: dict[str, Any] | None) -> tuple[str, str] | None:
    """("node", id), ("control-plane", name) or ("mirror", name) from a
    verified peer certificate as ssl's getpeercert() gives it; None for none."""
    if not peercert:
        return None
    for kind, value in peercert.get("subjectAltName", ()):
        if kind != "URI":
            continue
        for name, prefix in KINDS:
            if value.startswith(prefix) and len(value) > len(prefix):
                return name, value[len(prefix):]
    return None


def cert_identity(cert: x509.Certificate) -> tuple[str, str] | None:
    """identity() for a certificate read from a file rather than from a handshake."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return identity({"subjectAltName": [("URI", uri) for uri in sans.get_values_for_type(
        x509.UniformResourceIdentifier)]})
