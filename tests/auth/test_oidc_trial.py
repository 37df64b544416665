"""Trying a single sign-on configuration before it is kept: against the real provider, and each way it fails."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import ec

from llmgw.auth import Secrets
from llmgw.auth.oidc import OIDCClient, trial
from llmgw.config.auth import OIDCSettings
from llmgw.config.keyfiles import OwnSecrets
from llmgw.config.types import Duration
from llmgw.trust import pki
from tests.auth.oidckit import secret_file
from tests.support.oidcprovider import CLIENT_ID, OIDCProvider
from tests.support.pgcluster import free_port

CALLBACK = "https://gw.example/login/oidc/callback"

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # slow: a real OpenID provider (node)


@pytest.fixture
async def secrets(store, tmp_path):
    return Secrets(store, str(tmp_path), OwnSecrets())


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    started = OIDCProvider(tmp_path_factory.mktemp("op"), [CALLBACK]).start()
    yield started
    started.stop()


def failed_step(tried) -> tuple[str, str]:
    assert not tried.ok
    last = tried.steps[-1]
    assert not last.ok and all(s.ok for s in tried.steps[:-1])
    return last.name, last.detail


async def test_a_working_configuration_passes_each_step_and_shows_the_redirect_without_state(
        provider, secrets, tmp_path):
    settings = OIDCSettings(issuer=provider.issuer, client_id=CLIENT_ID, client_secret_file=secret_file(tmp_path))

    tried = await trial(settings, secrets, redirect_url=CALLBACK)

    assert tried.ok, tried.view()
    assert [s.name for s in tried.steps] == ["discovery", "key set", "client secret", "redirect"]
    redirect = tried.steps[-1].detail
    assert redirect.startswith(provider.issuer + "/auth?") and "client_id=llmgw" in redirect
    assert "redirect_uri=https%3A%2F%2Fgw.example%2Flogin%2Foidc%2Fcallback" in redirect
    assert "state=" not in redirect and "code_challenge_method=S256" in redirect
    assert "test-client-secret" not in str(tried.view())


async def test_a_client_secret_that_is_not_in_the_store_fails_its_step_with_the_command_to_keep_it(
        provider, secrets):
    settings = OIDCSettings(issuer=provider.issuer, client_id=CLIENT_ID,
                            client_secret_file="store:auth/oidc-client")
    assert failed_step(await trial(settings, secrets, redirect_url=CALLBACK)) == (
        "client secret", "auth.oidc.client_secret_file names store:auth/oidc-client, which is not in the store; "
                         "keep it with llmgw ctl auth secret set oidc-client")


async def test_an_issuer_with_a_wrong_path_says_what_the_address_answered(provider, secrets):
    settings = OIDCSettings(issuer=provider.issuer + "/realms/wrong", client_id=CLIENT_ID)
    step, detail = failed_step(await trial(settings, secrets, redirect_url=CALLBACK))
    assert step == "discovery"
    assert detail.startswith(f"{provider.issuer}/realms/wrong/.well-known/openid-configuration answered HTTP 404")


async def test_a_closed_port_is_said_to_refuse_the_connection(secrets):
    port = free_port()
    settings = OIDCSettings(issuer=f"http://127.0.0.1:{port}", client_id=CLIENT_ID)
    assert failed_step(await trial(settings, secrets, redirect_url=CALLBACK)) == (
        "discovery", f"127.0.0.1:{port} refused the connection; check the issuer's address and that the provider "
                     "is running")


async def serve(handler, context: ssl.SSLContext | None = None) -> TestServer:
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=context)
    return server


async def test_a_page_that_is_not_json_is_said_not_to_be_a_providers(secrets):
    async def html(request):
        return web.Response(text="<html>Welcome</html>", content_type="text/html")

    server = await serve(html)
    try:
        issuer = f"http://127.0.0.1:{server.port}"
        _, detail = failed_step(await trial(OIDCSettings(issuer=issuer, client_id=CLIENT_ID), secrets,
                                            redirect_url=CALLBACK))
    finally:
        await server.close()
    assert detail == (f"{issuer}/.well-known/openid-configuration did not answer the discovery document as a JSON "
                      "object; the address is probably not an OpenID provider's")


async def test_a_provider_that_does_not_answer_in_time_is_said_to_time_out(secrets):
    never = asyncio.Event()

    async def hang(request):
        await never.wait()
        return web.Response()

    server = await serve(hang)
    try:
        issuer = f"http://127.0.0.1:{server.port}"
        settings = OIDCSettings(issuer=issuer, client_id=CLIENT_ID, timeout=Duration("300ms"))
        _, detail = failed_step(await trial(settings, secrets, redirect_url=CALLBACK))
    finally:
        never.set()
        await server.close()
    assert detail.startswith(f"{issuer}/.well-known/openid-configuration did not answer within 0.3 s")


def tls_for(root, hosts: list[str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for `hosts` from a CA of the test's own, and a client that trusts it."""
    ca_cert, ca_key = pki.make_ca("test-op")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = pki.sign_server(ca_cert, ca_key, key.public_key(), "op", hosts)
    (root / "op.pem").write_text(pki.cert_pem(cert))
    (root / "op.key").write_bytes(pki.key_pem(key))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(root / "op.pem", root / "op.key")
    client = ssl.create_default_context(cadata=pki.cert_pem(ca_cert))
    return server, client


async def test_a_certificate_from_an_authority_this_machine_does_not_trust_is_said_so(secrets, tmp_path):
    server_tls, _ = tls_for(tmp_path, ["127.0.0.1"])

    async def doc(request):
        return web.json_response({})

    server = await serve(doc, server_tls)
    try:
        settings = OIDCSettings(issuer=f"https://127.0.0.1:{server.port}", client_id=CLIENT_ID)
        _, detail = failed_step(await trial(settings, secrets, redirect_url=CALLBACK))
    finally:
        await server.close()
    assert detail == ("127.0.0.1's certificate is signed by an authority this machine does not trust; add the "
                      "provider's CA to the system's trust store (update-ca-certificates)")


async def test_a_certificate_for_another_host_is_said_not_to_name_it(secrets, tmp_path):
    server_tls, client_tls = tls_for(tmp_path, ["op.corp.example"])

    async def doc(request):
        return web.json_response({})

    server = await serve(doc, server_tls)
    try:
        settings = OIDCSettings(issuer=f"https://127.0.0.1:{server.port}", client_id=CLIENT_ID)
        _, detail = failed_step(await trial(settings, secrets, redirect_url=CALLBACK,
                                            client=OIDCClient(tls=client_tls)))
    finally:
        await server.close()
    assert detail == ("127.0.0.1's certificate is not for 127.0.0.1 (the name is not among its SANs); use the "
                      "address the certificate names in issuer")
