"""`llmgw join CODE` on a node: a key made here, a certificate from the cluster, agent.yaml pointed at it.

The node's private key is made on the node and written only to its data
directory (0600); what travels is a certificate request, which carries the
public key. The CA is fetched over TLS that cannot be verified yet and kept
only if its sha256 is the one in the code; the token then goes over TLS
verified against that CA, so only a control plane of this cluster ever
sees it.

Plain http.client: a command that makes two requests and exits needs no
event loop.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from llmgw.config import Address
from llmgw.files import write_atomic
from llmgw.trust import pki
from llmgw.trust.code import JoinCode, decode_code
from llmgw.trust.masterkey import TrustError
from llmgw.trust.tls import node_files

TIMEOUT = 15.0


@dataclass(frozen=True)
class JoinResult:
    node_id: str
    name: str
    control_plane: str  # the one that signed
    data_dir: str
    config: str
    ca_fingerprint: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _host_port(address: str) -> tuple[str, int]:
    addr = Address(address)
    return addr.host, addr.port


def _request(address: str, ctx: ssl.SSLContext, method: str, path: str,
             body: bytes | None = None) -> tuple[int, bytes]:
    host, port = _host_port(address)
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def fetch_ca(code: JoinCode) -> tuple[str, str]:
    """(CA PEM, the control plane that gave it): the first control plane in
    the code whose CA has the pinned fingerprint."""
    # Not verified, on purpose: this is how the node learns the CA. What
    # comes back is trusted only if its fingerprint is the code's.
    blind = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    why: list[str] = []
    for address in code.control_planes:
        try:
            status, body = _request(address, blind, "GET", "/join/ca")
        except (OSError, http.client.HTTPException) as e:
            why.append(f"{address}: {_reason(e)}")
            continue
        if status != 200:
            why.append(f"{address}: answered {status} to /join/ca; is that an llmgw control plane's agent port?")
            continue
        try:
            ca = pki.load_cert(body)
        except TrustError:
            why.append(f"{address}: sent something that is not a certificate")
            continue
        got = pki.fingerprint(ca)
        if got != code.ca_fingerprint:
            why.append(f"{address}: its CA has the fingerprint {got}, not the code's {code.ca_fingerprint}; "
                       "it is not this cluster's control plane")
            continue
        return body.decode(), address
    raise TrustError("no control plane in the join code could be trusted:\n  " + "\n  ".join(why))


def _reason(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "nothing listens there (connection refused)"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return f"no answer in {TIMEOUT:.0f} s"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"its certificate does not hold: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        return f"TLS failed: {e.reason or e}"
    if isinstance(e, socket.gaierror):
        return f"the name does not resolve ({e.strerror})"
    return str(getattr(e, "strerror", None) or e)


def request_certificate(code: JoinCode, ca_pem: str, address: str, name: str) -> tuple[dict[str, Any], bytes]:
    """Present the token and a CSR to `address`: (the control plane's answer, the new private key as PEM)."""
    key = pki.new_key()
    csr = pki.make_csr(key, name)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=ca_pem)
    body = json.dumps({"token": code.secret, "csr": pki.csr_pem(csr), "name": name}).encode()
    try:
        status, raw = _request(address, ctx, "POST", "/join", body)
    except (OSError, http.client.HTTPException) as e:
        raise TrustError(f"the control plane at {address} could not be asked to sign: {_reason(e)}") from None
    try:
        answer = json.loads(raw)
    except ValueError:
        raise TrustError(f"the control plane at {address} answered {status} with something that is not JSON") from None
    if status != 200:
        message = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
        raise TrustError(message or f"the control plane at {address} refused the join ({status})")
    cert = pki.load_cert(answer["certificate"])
    mine = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    theirs = cert.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    if mine != theirs or pki.fingerprint(pki.load_cert(answer["ca"])) != code.ca_fingerprint:
        raise TrustError(f"the control plane at {address} sent a certificate that is not for this node's key")
    return answer, pki.key_pem(key)


def update_agent_config(path: str, control_planes: list[str], data_dir: str | None, name: str | None,
                        labels: dict[str, str] | None = None) -> None:
    """Write `control_planes` (and the data directory, name and labels when given)
    into agent.yaml, keeping its other keys and labels; checked as the agent will read it."""
    from llmgw.config import AgentConfig, ConfigError, from_dict, parse_yaml

    doc: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            doc = parse_yaml(f.read()) or {}
        if not isinstance(doc, dict):
            raise TrustError(f"{path} is not a YAML mapping; fix or remove it, then join again")
    doc["control_planes"] = list(control_planes)
    if data_dir:
        doc["data_dir"] = data_dir
    if name:
        doc["name"] = name
    if labels:
        doc["labels"] = {**(doc.get("labels") or {}), **labels}
    try:
        from_dict(AgentConfig, doc)
    except ConfigError as e:
        raise TrustError(f"{path}: {e}") from None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    mode = 0o644
    if os.path.exists(path):
        mode = os.stat(path).st_mode & 0o777
    text = ("# Written by llmgw join; other keys: docs/reference.md#agentyaml\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    write_atomic(path, text.encode(), mode)


def join(code_text: str, data_dir: str, config_path: str, *, name: str | None = None,
         force: bool = False, write_data_dir: bool = False, labels: dict[str, str] | None = None) -> JoinResult:
    """Join the cluster in `code_text`: certificate into `data_dir`, control planes into agent.yaml."""
    code = decode_code(code_text)
    ca_file, cert_file, key_file = node_files(data_dir)
    if os.path.exists(cert_file) and not force:
        raise TrustError(f"this node has already joined a cluster ({cert_file} exists); "
                         "to join again, give --force (the node gets a new id)")
    ca_pem, address = fetch_ca(code)
    suggested = name or socket.gethostname()
    answer, key_pem = request_certificate(code, ca_pem, address, suggested)
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        write_atomic(key_file, key_pem, 0o600)
        write_atomic(cert_file, answer["certificate"].encode(), 0o644)
        write_atomic(ca_file, answer["ca"].encode(), 0o644)
    except OSError as e:
        raise TrustError(f"the cluster signed this node's certificate, but it cannot be written to {data_dir}: "
                         f"{e.strerror}; run as root (or give --data-dir), then join with a new code") from None
    # The name goes into agent.yaml only when the administrator chose it
    # (node add --name, or join --name): a host name stays the default.
    chosen = answer["name"] if answer["name"] != suggested or name else None
    update_agent_config(config_path, list(code.control_planes), data_dir if write_data_dir else None, chosen,
                        labels)
    return JoinResult(answer["node_id"], answer["name"], address, data_dir, config_path, code.ca_fingerprint)
