"""Outside providers are never connected to at this machine, a link-local or a metadata address,
whatever name leads there, unless the provider allows private targets."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.loader import ConfigError, from_dict
from llmgw.config.router import ExternalSettings
from llmgw.config.targets import host_refusal
from llmgw.router.targets import providers_session


@pytest.fixture
async def listener():
    """A real HTTP listener on loopback, standing for one of this machine's own ports."""
    reached = []

    async def answer(request: web.Request) -> web.Response:
        reached.append(request.headers.get("Authorization"))
        return web.json_response({"reached": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1], reached
    await runner.cleanup()


@pytest.mark.parametrize("host", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "fe80::1", "169.254.1.9",
                                  "metadata.google.internal", "METADATA.google.internal.", "127.0.0.1", "::1",
                                  "::ffff:169.254.169.254", "0.0.0.0", "localhost", "api.localhost",
                                  "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0", "0251.254.169.254"])
def test_metadata_link_local_and_loopback_hosts_are_refused(host):
    assert host_refusal(host) is not None


@pytest.mark.parametrize("host", ["api.openai.com", "10.0.0.7", "172.16.4.2", "192.168.1.20", "fd12::7",
                                  "100.64.0.9", "8.8.8.8"])
def test_public_and_private_network_hosts_are_allowed(host):
    assert host_refusal(host) is None


def test_a_provider_url_at_the_metadata_address_is_refused_in_the_settings_with_what_to_do():
    with pytest.raises(ConfigError, match="169.254.169.254 is a cloud metadata address.*allow_private_targets"):
        from_dict(ExternalSettings, {"url": "http://169.254.169.254/latest/v1"})
    assert from_dict(ExternalSettings, {"url": "http://127.0.0.1:9/v1", "allow_private_targets": True})


async def test_a_name_that_resolves_to_loopback_is_not_connected_to_by_the_providers_session(listener, caplog):
    port, reached = listener
    # "localhost" is resolved by the system at connect time: the check sees the address, not the name.
    for host in ("localhost", "127.0.0.1", "[::ffff:127.0.0.1]"):
        async with providers_session() as session:
            with pytest.raises(aiohttp.ClientConnectorError):
                await session.post(f"http://{host}:{port}/v1/chat/completions", json={},
                                   headers={"Authorization": "Bearer sk-secret"})
    assert reached == []
    assert "127.0.0.1 is this machine (loopback); it is not connected to" in caplog.text


async def test_the_engines_session_still_reaches_an_engine_on_this_machine(listener):
    port, reached = listener
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}) as r:
            assert (await r.json()) == {"reached": True}
    assert reached == [None]
