"""The cluster's trust, in one process: a CA made once, join codes used once, and an agent port
that talks only to holders of the cluster's certificates. On both stores."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import socket
import ssl
import stat

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from llmgw import __version__
from llmgw.store import open_store
from llmgw.trust import (
    ClusterTrust,
    TrustError,
    client_ssl_context,
    decode_code,
    join,
    make_agent_app,
    node_identity,
    peer_node_id,
    pki,
)
from llmgw.trust.code import JoinCode
from tests.store.rawsql import raw_fetch


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    return sock


class AgentPort:
    """A control plane's trust and its agent port, served in this process.
    `bodies` keeps every request body the port received."""

    def __init__(self, store, data_dir, name="cp1"):
        self.store, self.data_dir, self.name = store, str(data_dir), name
        self.bodies: list[bytes] = []
        self.trust: ClusterTrust | None = None
        self.runner: web.AppRunner | None = None

    async def start(self) -> AgentPort:
        self.sock = listening()
        self.trust = ClusterTrust(self.store, self.data_dir, self.name)
        await self.trust.start(self.sock)
        if self.trust.ssl_context is None:
            self.sock.close()
            return self

        @web.middleware
        async def record(request, handler):
            self.bodies.append(await request.read())
            return await handler(request)

        def mount(app):
            async def node(request):
                return web.json_response({"node": peer_node_id(request)})

            app.router.add_get("/node", node)

        app = make_agent_app(self.trust, [mount])
        app.middlewares.insert(0, record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock, ssl_context=self.trust.ssl_context).start()
        return self

    @property
    def url(self) -> str:
        return f"https://{self.trust.agent_address}"

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()
        await self.trust.stop()


@pytest.fixture
async def port(store, tmp_path):
    p = await AgentPort(store, tmp_path / "cp1").start()
    yield p
    await p.stop()


async def join_node(port: AgentPort, tmp_path, code: str | None = None, node: str = "node", **kw):
    if code is None:
        code = (await port.trust.new_join_code("admin", "cli", **kw))["code"]
    data_dir, config = str(tmp_path / node), str(tmp_path / f"{node}.yaml")
    return await asyncio.to_thread(join, code, data_dir, config), data_dir, config


def no_verify() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def get(url: str, ctx: ssl.SSLContext) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.get(url, ssl=ctx) as r:
            return r.status, await r.json(content_type=None)


async def test_a_join_code_names_the_control_plane_and_pins_the_ca_it_serves(port):
    made = await port.trust.new_join_code("admin", "cli", name="gpu-1")
    code = decode_code(made["code"])
    assert made["command"] == f"llmgw join {made['code']}"
    assert code.control_planes == (port.trust.agent_address,)
    async with aiohttp.ClientSession() as s:
        async with s.get(port.url + "/join/ca", ssl=no_verify()) as r:
            served = await r.text()
    assert code.ca_fingerprint == pki.fingerprint(pki.load_cert(served)) == made["ca_fingerprint"]
    kept = await port.store.join_token(hashlib.sha256(code.secret.encode()).digest())
    assert kept.name == "gpu-1" and code.secret not in repr(kept)


async def test_a_joined_node_is_accepted_on_the_agent_port_with_the_id_it_was_given(port, tmp_path):
    done, data_dir, config = await join_node(port, tmp_path, name="gpu-1")
    assert done.name == "gpu-1" and done.node_id.startswith("node_")
    assert stat.S_IMODE(os.stat(os.path.join(data_dir, "node.key")).st_mode) == 0o600
    assert node_identity(data_dir).node_id == done.node_id
    assert await get(port.url + "/node", client_ssl_context(data_dir)) == (200, {"node": done.node_id})
    whoami = await get(port.url + "/whoami", client_ssl_context(data_dir))
    assert whoami == (200, {"kind": "node", "id": done.node_id, "control_plane": "cp1", "version": __version__})
    written = yaml.safe_load(open(config))
    assert written["control_planes"] == [port.trust.agent_address] and written["name"] == "gpu-1"
    assert [c.node_id for c in await port.store.list_node_certificates()] == [done.node_id]


async def test_joining_keeps_agent_yaml_s_other_keys(port, tmp_path):
    (tmp_path / "node.yaml").write_text("cache_dir: /big/disk\ncontrol_planes: [old.example:7443]\n")
    done, _, config = await join_node(port, tmp_path)
    written = yaml.safe_load(open(config))
    assert written["cache_dir"] == "/big/disk"
    assert written["control_planes"] == [port.trust.agent_address]


async def test_a_second_join_with_the_same_code_is_refused_with_a_sentence(port, tmp_path):
    code = (await port.trust.new_join_code("admin", "cli"))["code"]
    first, _, _ = await join_node(port, tmp_path, code)
    with pytest.raises(TrustError) as refused:
        await join_node(port, tmp_path, code, node="other")
    assert str(refused.value).startswith("this join code was already used")
    assert first.node_id in str(refused.value) and "llmgw node add" in str(refused.value)
    assert not os.path.exists(tmp_path / "other" / "node.key")


async def test_an_expired_code_is_refused_with_when_it_ran_out(port, tmp_path):
    code = (await port.trust.new_join_code("admin", "cli", ttl=0.5))["code"]
    await asyncio.sleep(0.7)  # the behaviour under test: the code's 0.5 s running out
    with pytest.raises(TrustError, match=r"^this join code ran out at .* UTC; make a new one with llmgw node add"):
        await join_node(port, tmp_path, code)


async def test_a_code_the_cluster_never_made_is_refused(port, tmp_path):
    forged = JoinCode((port.trust.agent_address,), port.trust.ca_fingerprint, "x" * 43).encode()
    with pytest.raises(TrustError, match="^this join code is not one this cluster made"):
        await join_node(port, tmp_path, forged)


async def test_a_control_plane_without_the_pinned_ca_never_sees_the_secret(port, tmp_path):
    made = decode_code((await port.trust.new_join_code("admin", "cli"))["code"])
    wrong = JoinCode(made.control_planes, "ab" * 32, made.secret).encode()
    with pytest.raises(TrustError) as refused:
        await join_node(port, tmp_path, wrong)
    assert "it is not this cluster's control plane" in str(refused.value)
    assert not any(made.secret.encode() in b for b in port.bodies)
    # The code was not spent: the real one still works.
    done, _, _ = await join_node(port, tmp_path, JoinCode(made.control_planes, made.ca_fingerprint,
                                                          made.secret).encode())
    assert done.node_id


async def test_a_client_without_a_certificate_may_join_but_nothing_else(port, tmp_path):
    for path in ("/node", "/whoami", "/anything"):
        status, body = await get(port.url + path, no_verify())
        assert status == 403
        assert body["error"]["code"] == "certificate_required"
        assert "llmgw join CODE" in body["error"]["message"]
    # Joining is what such a client may do: `llmgw join` comes with a code and no certificate.
    done, _, _ = await join_node(port, tmp_path)
    assert done.node_id


async def test_a_client_with_a_certificate_from_another_ca_is_refused_at_the_handshake(port, tmp_path):
    other_ca, other_key = pki.make_ca("elsewhere")
    key = pki.new_key()
    cert = pki.sign_node(other_ca, other_key, pki.make_csr(key, "intruder"), "node_intruder")
    (tmp_path / "x.crt").write_text(pki.cert_pem(cert))
    (tmp_path / "x.key").write_bytes(pki.key_pem(key))
    ctx = no_verify()
    ctx.load_cert_chain(tmp_path / "x.crt", tmp_path / "x.key")
    with pytest.raises((aiohttp.ClientConnectionError, ssl.SSLError)):
        await get(port.url + "/node", ctx)


async def test_a_nodes_certificate_cannot_pose_as_a_control_plane(port, tmp_path):
    done, data_dir, _ = await join_node(port, tmp_path)
    impostor = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    impostor.load_cert_chain(os.path.join(data_dir, "node.crt"), os.path.join(data_dir, "node.key"))
    sock = listening()
    server = await asyncio.start_server(lambda r, w: w.close(), sock=sock, ssl=impostor)
    try:
        host, p = sock.getsockname()[:2]
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection(host, p, ssl=client_ssl_context(data_dir), server_hostname="127.0.0.1")
    finally:
        server.close()


async def test_the_nodes_private_key_is_never_in_the_store_or_any_request(port, tmp_path, store_url):
    done, data_dir, _ = await join_node(port, tmp_path)
    key = pki.load_key(open(os.path.join(data_dir, "node.key"), "rb").read())
    secret = key.private_numbers().private_value
    marks = [pki.key_pem(key), base64.b64encode(pki.key_pem(key)), secret.to_bytes(32, "big"),
             format(secret, "x").encode(), str(secret).encode()]
    for body in port.bodies:
        assert not any(m in body for m in marks)
    assert b"CERTIFICATE REQUEST" in b"".join(port.bodies)  # what did travel
    if store_url.startswith("sqlite:"):
        tables = await raw_fetch(store_url, "SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        tables = await raw_fetch(store_url, "SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'public'")
    assert ("node_certificates",) in tables
    for (table,) in tables:
        rows = repr(await raw_fetch(store_url, f"SELECT * FROM {table}")).encode()
        assert not any(m in rows for m in marks), table


async def test_the_ca_key_is_sealed_in_the_store_and_opens_only_with_the_master_key(port, tmp_path, store_url):
    (cert_pem, sealed), = await raw_fetch(store_url, "SELECT cert_pem, key_sealed FROM cluster_ca")
    assert b"PRIVATE KEY" not in bytes(sealed)
    master = tmp_path / "cp1" / "master-key"
    assert stat.S_IMODE(os.stat(master).st_mode) == 0o600

    second = await AgentPort(await open_store(store_url), tmp_path / "cp2", "cp2").start()
    try:
        assert second.trust.ssl_context is None
        assert f"there is no master key at {tmp_path / 'cp2' / 'master-key'}" in second.trust.problem
        assert "copy the master-key file from the control plane that made the cluster" in second.trust.problem
        assert second.trust.ca_fingerprint == port.trust.ca_fingerprint
    finally:
        await second.stop()
        await second.store.close()

    (tmp_path / "cp2").mkdir(exist_ok=True)
    shutil.copy(master, tmp_path / "cp2" / "master-key")
    third = await AgentPort(await open_store(store_url), tmp_path / "cp2", "cp2").start()
    try:
        done, data_dir, _ = await join_node(port, tmp_path)
        assert await get(third.url + "/node", client_ssl_context(data_dir)) == (200, {"node": done.node_id})
        listed = [c.agent_address for c in await port.store.list_control_planes()]
        assert sorted(listed) == sorted([port.trust.agent_address, third.trust.agent_address])
    finally:
        await third.stop()
        await third.store.close()


async def test_a_master_key_that_does_not_open_the_ca_shuts_only_the_agent_port(port, tmp_path, store_url):
    (tmp_path / "cp2").mkdir()
    fd = os.open(tmp_path / "cp2" / "master-key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, base64.b64encode(os.urandom(32)))
    os.close(fd)
    other = await AgentPort(await open_store(store_url), tmp_path / "cp2", "cp2").start()
    try:
        assert other.trust.ssl_context is None
        assert "is not the one the cluster CA was sealed under" in other.trust.problem
    finally:
        await other.stop()
        await other.store.close()


async def test_a_master_key_others_can_read_stops_the_start(store, tmp_path):
    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "master-key").write_text(base64.b64encode(os.urandom(32)).decode())
    os.chmod(tmp_path / "cp" / "master-key", 0o644)
    with pytest.raises(TrustError, match="can be read by others"):
        await AgentPort(store, tmp_path / "cp").start()


async def test_the_agent_ports_certificate_names_loopback_and_this_host(port):
    cert = pki.load_cert(open(port.trust.cert_file, "rb").read())
    sans = cert.extensions.get_extension_for_class(pki.x509.SubjectAlternativeName).value
    names = {str(v.value) for v in sans}
    assert {"127.0.0.1", "::1", "localhost", socket.gethostname(), "urn:llmgw:control-plane:cp1"} <= names
    assert stat.S_IMODE(os.stat(port.trust.key_file).st_mode) == 0o600


async def test_a_join_code_lives_from_a_second_to_a_week(port):
    from llmgw.trust import JoinRefused

    with pytest.raises(JoinRefused, match="a join code lives from 1s to 7 days"):
        await port.trust.new_join_code("admin", "cli", ttl=8 * 86400)
    with pytest.raises(JoinRefused, match="is not a node name"):
        await port.trust.new_join_code("admin", "cli", name="bad name!")


async def test_a_broken_certificate_request_does_not_spend_the_code(port, tmp_path):
    made = await port.trust.new_join_code("admin", "cli")
    secret = decode_code(made["code"]).secret
    async with aiohttp.ClientSession() as s:
        async with s.post(port.url + "/join", data=orjson.dumps({"token": secret, "csr": "nonsense"}),
                          ssl=no_verify()) as r:
            assert r.status == 400
            assert (await r.json())["error"]["message"] == "the certificate request is not a PEM CSR"
    done, _, _ = await join_node(port, tmp_path, made["code"])
    assert done.node_id


@pytest.mark.parametrize("text", ["", "hello world", "eyJ2IjoxfQ", base64.urlsafe_b64encode(b'{"v":2}').decode()])
def test_text_that_is_not_a_join_code_is_refused_with_a_sentence(text):
    with pytest.raises(TrustError, match="join code"):
        decode_code(text)


async def mirror_files(port: AgentPort, tmp_path, name: str = "m2", hosts=("127.0.0.1", "mirror-2.example")):
    """A mirror's key made here, its CSR signed by the control plane: (answer, cert file, key file)."""
    key = pki.new_key()
    made = await port.trust.sign_mirror(pki.csr_pem(pki.make_csr(key, name)), name, list(hosts), "admin", "cli")
    cert_file, key_file = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_file.write_text(made["certificate"])
    key_file.write_bytes(pki.key_pem(key))
    return made, cert_file, key_file


async def test_a_mirrors_certificate_is_signed_for_its_csr_names_its_addresses_serves_and_dials_and_is_audited(
        port, tmp_path, store):
    made, cert_file, _ = await mirror_files(port, tmp_path, hosts=("127.0.0.1", "mirror-2.example", "not a host"))
    cert = pki.load_cert(made["certificate"])
    sans = cert.extensions.get_extension_for_class(pki.x509.SubjectAlternativeName).value
    assert {str(v.value) for v in sans} == {"urn:llmgw:mirror:m2", "127.0.0.1", "mirror-2.example"}
    assert made["hosts"] == ["127.0.0.1", "mirror-2.example"] and made["ca"] == port.trust.ca_pem
    usages = cert.extensions.get_extension_for_class(pki.x509.ExtendedKeyUsage).value
    assert set(usages) == {pki.ExtendedKeyUsageOID.SERVER_AUTH, pki.ExtendedKeyUsageOID.CLIENT_AUTH}
    assert pki.cert_identity(cert) == ("mirror", "m2")
    assert cert.issuer == pki.load_cert(port.trust.ca_pem).subject
    entry = (await store.list_audit(limit=5))[0]
    assert (entry.action, entry.target, entry.actor) == ("mirror.certificate", "mirror:m2", "admin")
    assert entry.after["fingerprint"] == made["fingerprint"] == pki.fingerprint(cert)
    assert "PRIVATE KEY" not in str(entry.after) + str(made)


@pytest.mark.parametrize(("name", "hosts", "csr", "said"), [
    ("m 2", ["127.0.0.1"], None, "'m 2' is not a mirror name"),
    ("m2", ["not a host"], None, "give hosts"),
    ("m2", ["127.0.0.1"], "not a csr", "not a PEM CSR"),
])
async def test_a_mirror_certificate_asked_for_wrongly_is_refused_with_a_sentence(port, name, hosts, csr, said):
    csr = csr or pki.csr_pem(pki.make_csr(pki.new_key(), "m2"))
    with pytest.raises(TrustError) as refused:
        await port.trust.sign_mirror(csr, name, hosts, "admin", "cli")
    assert refused.value.status == 400 and said in str(refused.value)


async def test_a_mirrors_certificate_is_refused_on_the_agent_port_as_a_node_and_as_a_control_plane(port, tmp_path):
    _, cert_file, key_file = await mirror_files(port, tmp_path)
    ctx = ssl.create_default_context(cafile=port.trust.ca_file)
    ctx.load_cert_chain(cert_file, key_file)
    for path in ("/node", "/whoami", "/agent", "/routing/activity"):
        status, body = await get(port.url + path, ctx)
        assert status == 403, path
        assert body["error"]["message"] == ("the agent port takes nodes' and control planes' certificates; this is "
                                            "a mirror's (m2)")


def test_only_the_kinds_own_uri_names_a_mirror_a_node_or_a_control_plane():
    def sans(*uris):
        return {"subjectAltName": [("DNS", "x"), *(("URI", u) for u in uris)]}

    assert pki.identity(sans("urn:llmgw:mirror:m2")) == ("mirror", "m2")
    assert pki.identity(sans("urn:llmgw:mirror:")) is None
    assert pki.identity(sans("urn:llmgw:mirrorx:cp1")) is None
    assert pki.identity(sans("urn:llmgw:control-plane:cp1")) == ("control-plane", "cp1")
    assert pki.identity(sans("urn:llmgw:node:node_1")) == ("node", "node_1")
