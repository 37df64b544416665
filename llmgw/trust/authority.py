"""The cluster CA on a control plane: made at the first start, shared through the store.

At start a control plane reads the CA from the store (making it when there
is none), unseals its key with the master key in its data directory, makes
itself a server certificate for the agent port, and writes where it takes
agents. It then gives out join codes (`llmgw node add`) and signs the
certificate requests of nodes that present one (`llmgw join`), and of
model mirrors on machines of their own (`llmgw mirror add-peer`).

A control plane whose master key does not open the CA (the file was not
copied from the first control plane) still serves everything else; only
its agent port stays shut, and it says so in its log and in `ctl status`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import ipaddress
import logging
import os
import re
import secrets
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from llmgw import __version__
from llmgw.files import write_atomic
from llmgw.store import AuditEntry, AuditStore, ClusterCA, ControlPlaneAddress, JoinToken, NodeCertificate, TrustStore
from llmgw.trust import pki
from llmgw.trust.code import JoinCode
from llmgw.trust.masterkey import FILE_NAME, MasterKey, TrustError, ensure_master_key, read_master_key
from llmgw.trust.tls import server_ssl_context

log = logging.getLogger("llmgw.trust")

CA_KEY_PURPOSE = "cluster CA key"
DEFAULT_JOIN_TTL = 3600.0
# A code is a key to the cluster lying in a chat or a ticket; a week is
# long enough for any rollout and short enough that a forgotten one dies.
MAX_JOIN_TTL = 7 * 86400.0
# Renew the agent port's certificate this long before it runs out.
RENEW_BEFORE = dt.timedelta(days=30)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,62}$")


ENGINE_KEY_PURPOSE = "engine-api-key"


class JoinRefused(TrustError):
    """A join (or a mirror's certificate) the control plane will not give, with the HTTP status that fits it."""

    def __init__(self, message: str, status: int = 403, code: str = "join_refused"):
        super().__init__(message)
        self.status, self.code = status, code


@dataclass(frozen=True)
class Joined:
    node_id: str
    name: str
    cert_pem: str
    ca_pem: str


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def token_digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def node_name(suggested: str | None, node_id: str) -> str:
    """A name the cluster can show and placement can refer to; the node id when the suggestion is not one."""
    name = (suggested or "").strip()
    return name if _NAME.match(name) else node_id


class _Store(TrustStore, AuditStore, Protocol):
    """What ClusterTrust calls: the CA, join tokens, certificates and addresses, and the audit it writes."""


class ClusterTrust:
    def __init__(self, store: _Store, data_dir: str, name: str):
        self.store = store
        self.data_dir = data_dir
        self.name = name
        self.master_key_path = os.path.join(data_dir, FILE_NAME)
        self.cert_file = os.path.join(data_dir, "tls", "agent-port.crt")
        self.key_file = os.path.join(data_dir, "tls", "agent-port.key")
        # The CA's certificate beside them: what `llmgw mirror serve` on this machine checks its clients' against.
        self.ca_file = os.path.join(data_dir, "tls", "ca.crt")
        self.ca_pem = ""
        self.ca_fingerprint = ""
        self.agent_address = ""
        self.hosts: list[str] = []
        # None until start(), and stays None when the CA cannot be opened here.
        self.ssl_context: ssl.SSLContext | None = None
        self.problem: str | None = None
        # The CA's certificate once read from the store; its key once the
        # master key here has opened it (never without the certificate).
        self._ca_cert: x509.Certificate | None = None
        self._ca_key: ec.EllipticCurvePrivateKey | None = None
        self.engine_key = ""  # never logged
        self._renewer: asyncio.Task[None] | None = None
        self._client_ssl: ssl.SSLContext | None = None

    # start

    async def start(self, agent_sock: socket.socket, advertise: str = "") -> None:
        """Open (or make) the CA, certify this control plane for the agent
        port, and record its address. Raises TrustError only for what must
        stop the start (a master key others can read, a data directory it
        cannot write); a CA it cannot open leaves `problem` set instead."""
        ca = await self.store.get_cluster_ca()
        key: MasterKey | None
        if ca is None:
            key = await asyncio.to_thread(ensure_master_key, self.master_key_path)
            cert, ca_key = await asyncio.to_thread(pki.make_ca, f"llmgw {secrets.token_hex(4)}")
            made = ClusterCA(pki.cert_pem(cert), key.seal(pki.key_pem(ca_key), CA_KEY_PURPOSE), time.time())
            ca = await self.store.put_cluster_ca(made)
            if ca == made:
                log.info("made the cluster CA (%s); its key is sealed under %s", pki.fingerprint(cert),
                         self.master_key_path)
        else:
            try:
                key = await asyncio.to_thread(read_master_key, self.master_key_path)
            except FileNotFoundError:
                key = None
        self._ca_cert = pki.load_cert(ca.cert_pem)
        self.ca_pem = ca.cert_pem
        self.ca_fingerprint = pki.fingerprint(self._ca_cert)
        self.agent_address = agent_address(agent_sock, advertise)
        await self.store.put_control_plane(ControlPlaneAddress(self.name, self.agent_address, time.time(), __version__))
        if key is None:
            self._refuse_agents(f"there is no master key at {self.master_key_path}")
            return
        try:
            self._ca_key = pki.load_key(key.unseal(ca.key_sealed, CA_KEY_PURPOSE))
            # The key the cluster's engines are started with, so that only the
            # control planes' routers can use them: the same on every control plane.
            self.engine_key = base64.urlsafe_b64encode(key.derive(ENGINE_KEY_PURPOSE)).decode().rstrip("=")
        except TrustError:
            self._refuse_agents(f"the master key at {self.master_key_path} is not the one the cluster CA "
                                "was sealed under")
            return
        self.hosts = await asyncio.to_thread(_own_hosts, agent_sock, advertise, self.agent_address)
        await asyncio.to_thread(self._certify)
        self.ssl_context = context = server_ssl_context(self.cert_file, self.key_file, self.ca_pem)
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop(context))

    def expiries(self) -> dict[str, float]:
        """When this control plane's agent-port certificate and the cluster CA's run out (none before start())."""
        found = {}
        if self._ca_cert is not None:
            found["ca"] = self._ca_cert.not_valid_after_utc.timestamp()
        if self.ssl_context is not None:
            found["agent-port"] = self._server_not_after.timestamp()
        return found

    def client_context(self) -> ssl.SSLContext | None:
        """This control plane dialing another part of the cluster (a standby's routing exchange, a model mirror):
        its agent-port certificate, made for client use too, and the cluster CA as the only authority. None
        while the agent port is shut (no CA opened here)."""
        if self.ssl_context is None:
            return None
        if self._client_ssl is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_verify_locations(cadata=self.ca_pem)
            ctx.load_cert_chain(self.cert_file, self.key_file)
            self._client_ssl = ctx
        return self._client_ssl

    def _refuse_agents(self, why: str) -> None:
        self.problem = (f"{why}, so this control plane cannot prove itself to agents and takes none; "
                        f"copy the master-key file from the control plane that made the cluster to "
                        f"{self.master_key_path} (chmod 600) and restart")
        log.error("agent port shut: %s", self.problem)

    def _signer(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
        """The CA's certificate and key, once both are open here; None before."""
        if self._ca_cert is None or self._ca_key is None:
            return None
        return self._ca_cert, self._ca_key

    def _certify(self) -> None:
        """A new key and certificate for the agent port, written 0600/0644 under data_dir/tls."""
        signer = self._signer()
        assert signer is not None, "start() opens the CA before it certifies this control plane"
        key = pki.new_key()
        cert = pki.sign_server(*signer, key.public_key(), self.name, self.hosts)
        os.makedirs(os.path.dirname(self.cert_file), mode=0o700, exist_ok=True)
        write_atomic(self.key_file, pki.key_pem(key), 0o600)
        write_atomic(self.cert_file, pki.cert_pem(cert).encode(), 0o644)
        write_atomic(self.ca_file, self.ca_pem.encode(), 0o644)
        self._server_not_after = cert.not_valid_after_utc

    async def _renew_loop(self, context: ssl.SSLContext) -> None:
        while True:
            await asyncio.sleep(86400)
            if self._server_not_after - dt.datetime.now(dt.UTC) < RENEW_BEFORE:
                try:
                    await asyncio.to_thread(self._certify)
                    # New handshakes take the new certificate; open connections keep theirs.
                    context.load_cert_chain(self.cert_file, self.key_file)
                    log.info("renewed the agent port's certificate")
                except (OSError, ssl.SSLError) as e:
                    log.error("could not renew the agent port's certificate: %s", e)

    async def stop(self) -> None:
        if self._renewer:
            self._renewer.cancel()
            try:
                await self._renewer
            except asyncio.CancelledError:
                pass

    # join codes

    async def new_join_code(self, actor: str, via: str, name: str | None = None, ttl: float = DEFAULT_JOIN_TTL,
                            control_planes: list[str] | None = None) -> dict[str, Any]:
        """A one-time join code, recorded by the sha256 of its secret only."""
        if not 0 < ttl <= MAX_JOIN_TTL:
            raise JoinRefused(f"a join code lives from 1s to {int(MAX_JOIN_TTL // 86400)} days; "
                              f"{ttl:g} s is outside that", 400, "invalid_request")
        if name is not None and not _NAME.match(name):
            raise JoinRefused(f"{name!r} is not a node name: letters, digits, '.', '-' and '_', "
                              "starting with a letter or digit, at most 63", 400, "invalid_request")
        if not self.ca_fingerprint:
            raise JoinRefused("this control plane has not set up the cluster CA yet", 503, "not_ready")
        if not control_planes:
            known = await self.store.list_control_planes()
            control_planes = [self.agent_address] + [c.agent_address for c in known
                                                      if c.agent_address != self.agent_address]
        secret = secrets.token_urlsafe(32)
        now = time.time()
        token = JoinToken(f"join_{secrets.token_hex(8)}", token_digest(secret), name, now, now + ttl, actor)
        await self.store.add_join_token(token)
        await self.store.add_audit(AuditEntry(
            now, actor, via, "node.join_code", f"join:{token.id}",
            after={"name": name, "expires_at": token.expires_at, "control_planes": control_planes}))
        code = JoinCode(tuple(control_planes), self.ca_fingerprint, secret).encode()
        return {"id": token.id, "name": name, "expires_at": token.expires_at, "control_planes": control_planes,
                "ca_fingerprint": self.ca_fingerprint, "code": code, "command": f"llmgw join {code}"}

    # joining

    async def join(self, secret: str, csr_pem: str, suggested_name: str | None = None) -> Joined:
        """Sign a node's certificate request in exchange for an unused, unexpired join token."""
        signer = self._signer()
        if signer is None:
            raise JoinRefused(self.problem or "this control plane cannot sign certificates", 503, "not_ready")
        # The request is checked before the token is spent, so a broken
        # request does not cost the node its code.
        try:
            csr = pki.check_csr(csr_pem)
        except TrustError as e:
            raise JoinRefused(str(e), 400, "invalid_request") from None
        digest = token_digest(secret)
        node_id = f"node_{secrets.token_hex(8)}"
        now = time.time()
        used = await self.store.use_join_token(digest, node_id, now)
        if used is None:
            raise JoinRefused(await self._why_refused(digest))
        name = used.name or node_name(suggested_name, node_id)
        cert = await asyncio.to_thread(pki.sign_node, *signer, csr, node_id)
        record = NodeCertificate(format(cert.serial_number, "x"), node_id, name, pki.fingerprint(cert),
                                 cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp())
        await self.store.add_node_certificate(record)
        await self.store.add_audit(AuditEntry(
            now, f"node {name}", "system", "node.join", f"node:{node_id}",
            after={"name": name, "join_code": used.id, "serial": record.serial,
                   "fingerprint": record.fingerprint, "expires_at": record.expires_at}))
        log.info("node %s joined as %s", name, node_id)
        return Joined(node_id, name, pki.cert_pem(cert), self.ca_pem)

    # a model mirror's certificate

    async def sign_mirror(self, csr_pem: str, name: str, hosts: list[str], actor: str, via: str) -> dict[str, Any]:
        """A certificate for a model mirror on another machine (`llmgw mirror add-peer`), for its CSR: the key was
        made there and never leaves it. Asked for through the admin API, so the admin token is what lets one in,
        as for a join code; audited as `mirror.certificate`."""
        signer = self._signer()
        if signer is None:
            raise JoinRefused(self.problem or "this control plane cannot sign certificates", 503, "not_ready")
        if not _NAME.match(name):
            raise JoinRefused(f"{name!r} is not a mirror name: letters, digits, '.', '-' and '_', starting with a "
                              "letter or digit, at most 63", 400, "invalid_request")
        sans = pki.host_names(hosts)
        if not sans:
            raise JoinRefused("give hosts: the addresses (or host names) the nodes and control planes reach the "
                              "mirror at; its certificate names them", 400, "invalid_request")
        try:
            csr = pki.check_csr(csr_pem)
        except TrustError as e:
            raise JoinRefused(str(e), 400, "invalid_request") from None
        cert = await asyncio.to_thread(pki.sign_mirror, *signer, csr, name, hosts)
        named = [str(san.value) for san in sans]
        serial, fp = format(cert.serial_number, "x"), pki.fingerprint(cert)
        expires = cert.not_valid_after_utc.timestamp()
        await self.store.add_audit(AuditEntry(
            time.time(), actor, via, "mirror.certificate", f"mirror:{name}",
            after={"name": name, "hosts": named, "serial": serial, "fingerprint": fp, "expires_at": expires}))
        log.info("signed a certificate for the model mirror %s (%s)", name, ", ".join(named))
        return {"name": name, "hosts": named, "certificate": pki.cert_pem(cert), "ca": self.ca_pem,
                "serial": serial, "fingerprint": fp, "expires_at": expires}

    async def _why_refused(self, digest: bytes) -> str:
        known = await self.store.join_token(digest)
        again = "make a new one with llmgw node add on a control plane"
        if known is None:
            return f"this join code is not one this cluster made, or it ran out over a week ago; {again}"
        if known.used_at is not None:
            return (f"this join code was already used, at {_when(known.used_at)} (by node {known.node_id}); "
                    f"a code lets in one node; {again}")
        return f"this join code ran out at {_when(known.expires_at)}; {again}"


def agent_address(sock: socket.socket, advertise: str = "") -> str:
    """HOST:PORT nodes reach this control plane's agent port at: the address
    it listens on when that is one address, else the host of `advertise`,
    else this machine's address on its default route, else its host name."""
    host, port = sock.getsockname()[:2]
    if host not in ("0.0.0.0", "::"):  # noqa: S104 - read, not bound
        return _join_host(host, port)
    if advertise:
        named = urlsplit(advertise if "://" in advertise else f"http://{advertise}").hostname
        if named:
            return _join_host(named, port)
    return _join_host(_default_route_ip() or socket.gethostname(), port)


def _join_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _default_route_ip() -> str | None:
    # A UDP "connect" only picks the route and the source address; no
    # packet is sent, so this works on a machine with no way out.
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never a real host
        ip = probe.getsockname()[0]
        return None if ip.startswith("0.") else ip
    except OSError:
        return None
    finally:
        probe.close()


def machine_hosts() -> list[str]:
    """This machine's names and addresses, for a certificate others dial it by: loopback, its host names, and every
    address of its interfaces but link-local ones (a control plane's agent port, a model mirror)."""
    import psutil

    hosts = ["127.0.0.1", "::1", "localhost", socket.gethostname()]
    try:
        fqdn = socket.getfqdn()
        if fqdn and fqdn != "localhost":
            hosts.append(fqdn)
    except OSError:
        pass
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                ip = a.address.split("%")[0]
                try:
                    if ipaddress.ip_address(ip).is_link_local:
                        continue
                except ValueError:
                    continue
                hosts.append(ip)
    return list(dict.fromkeys(hosts))


def _own_hosts(sock: socket.socket, advertise: str, address: str) -> list[str]:
    """The names and addresses this control plane's certificate is for: every
    address of this machine (agents may dial any of them), loopback, its
    host names, and what `advertise` and the recorded address say."""
    hosts = machine_hosts()
    listen = sock.getsockname()[0]
    if listen not in ("0.0.0.0", "::"):  # noqa: S104 - read, not bound
        hosts.append(listen)
    hosts.append(address.rsplit(":", 1)[0].strip("[]"))
    if advertise:
        named = urlsplit(advertise if "://" in advertise else f"http://{advertise}").hostname
        if named:
            hosts.append(named)
    return hosts
