"""TLS on the agent port: the contexts for both ends, and who is on the other end.

One listener, one context, `CERT_OPTIONAL`: the server asks every client for
a certificate and OpenSSL checks any that is sent against the cluster CA
during the handshake, so a certificate from another CA (or an expired one,
or a server's used as a client's) ends the connection there. A client that
sends none completes the handshake, because the join route must answer a
node that has no certificate yet; every other route is refused with 403 by
the agent port's middleware (agentport.py) before its handler runs. aiohttp
has no per-route TLS, and a second port for joining would be one more
firewall rule at every site, so the split is made in the middleware, on the
certificate the TLS layer verified (`peercert`), never on anything the
client says in HTTP.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from cryptography import x509

from llmgw.trust import pki
from llmgw.trust.masterkey import TrustError

# A node's files under the agent's data directory (agent.yaml data_dir).
CA_FILE = "ca.crt"
NODE_CERT_FILE = "node.crt"
NODE_KEY_FILE = "node.key"


def server_ssl_context(cert_file: str, key_file: str, ca_pem: str) -> ssl.SSLContext:
    """The agent port's context: this control plane's certificate, and any
    client certificate checked against the cluster CA (and only it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    # cadata, not the system's store: a certificate from any public CA is
    # worth nothing here.
    ctx.load_verify_locations(cadata=ca_pem)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


@dataclass(frozen=True)
class NodeIdentity:
    """Who a joined node is, from the files `llmgw join` wrote."""

    node_id: str
    ca_fingerprint: str
    not_after: float  # when the node's certificate runs out, seconds since the epoch


def node_files(agent_data_dir: str) -> tuple[str, str, str]:
    """(ca.crt, node.crt, node.key) under the agent's data directory."""
    return (os.path.join(agent_data_dir, CA_FILE), os.path.join(agent_data_dir, NODE_CERT_FILE),
            os.path.join(agent_data_dir, NODE_KEY_FILE))


def _not_joined(agent_data_dir: str) -> TrustError:
    return TrustError(f"this node has not joined a cluster: there is no certificate in {agent_data_dir}; "
                      "run llmgw node add on a control plane, then llmgw join CODE here")


def node_identity(agent_data_dir: str) -> NodeIdentity:
    """The node's id and the CA it trusts; TrustError when it has not joined."""
    ca_file, cert_file, _ = node_files(agent_data_dir)
    try:
        with open(cert_file, "rb") as f:
            cert = pki.load_cert(f.read())
        with open(ca_file, "rb") as f:
            ca = pki.load_cert(f.read())
    except FileNotFoundError:
        raise _not_joined(agent_data_dir) from None
    except OSError as e:
        raise TrustError(f"cannot read this node's certificate in {agent_data_dir}: {e.strerror}") from None
    for value in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value:
        if isinstance(value, x509.UniformResourceIdentifier) and value.value.startswith(pki.NODE_URI):
            return NodeIdentity(value.value[len(pki.NODE_URI):], pki.fingerprint(ca),
                                cert.not_valid_after_utc.timestamp())
    raise TrustError(f"{cert_file} is not a node's certificate; join again with llmgw join CODE")


def client_ssl_context(agent_data_dir: str) -> ssl.SSLContext:
    """The context an agent dials a control plane's agent port with: the
    cluster CA as the only authority, the node's certificate as its own.

    Host names are checked: a control plane's certificate names the
    addresses it is reached at (its IPs, host name and `advertise`)."""
    ca_file, cert_file, key_file = node_files(agent_data_dir)
    if not os.path.exists(cert_file):
        raise _not_joined(agent_data_dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cafile=ca_file)
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError:
        raise _not_joined(agent_data_dir) from None
    except PermissionError:
        raise TrustError(f"cannot read this node's key in {agent_data_dir}: permission denied; "
                         "run the agent as the user that ran llmgw join") from None
    except ssl.SSLError as e:
        raise TrustError(f"this node's certificate files in {agent_data_dir} do not go together ({e.reason}); "
                         "join again with llmgw join CODE") from None
    return ctx


def peer_identity(request: web.Request) -> tuple[str, str] | None:
    """("node", id), ("control-plane", name) or ("mirror", name) for the
    certificate the TLS layer verified on this request's connection; None
    without one."""
    transport = request.transport
    if transport is None:
        return None
    return pki.identity(transport.get_extra_info("peercert"))


def peer_node_id(request: web.Request) -> str | None:
    """The node id in the verified client certificate of this request; None
    when the client is not a node (no certificate, or a control plane's)."""
    who = peer_identity(request)
    return who[1] if who and who[0] == "node" else None


def peer_control_plane(request: web.Request) -> str | None:
    """The name of the control plane whose certificate this request came with, or None (a node's, a mirror's)."""
    who = peer_identity(request)
    return who[1] if who and who[0] == "control-plane" else None


def control_plane_named(peercert: dict[str, Any] | None) -> str | None:
    """The control plane a verified server certificate (as ssl's getpeercert() gives it) is for, or None.

    A node checks this of the server it dials: every certificate the cluster CA signs passes the TLS check, and a
    mirror's is made for serving, so a mirror's machine holding a control plane's address would otherwise be
    taken for one, and be sent the node's Register and obeyed."""
    who = pki.identity(peercert)
    return who[1] if who and who[0] == "control-plane" else None


def peer_mirror(request: web.Request) -> str | None:
    """The name of the model mirror whose certificate this request came with, or None."""
    who = peer_identity(request)
    return who[1] if who and who[0] == "mirror" else None
