"""A node tells its hardware and takes orders only from a control plane: a server whose certificate the cluster
CA signed for anything else (a model mirror's, which is made for serving) is refused before a word is sent."""

from __future__ import annotations

import asyncio
import logging
import ssl

from aiohttp import web

from llmgw.agent.link import ClusterLink
from tests.support.mirrors import Certs


async def _agent_port(context: ssl.SSLContext, heard: list[str]) -> tuple[web.AppRunner, str]:
    """A stand-in agent port: it records any message a node sends on /agent."""
    async def agent(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            heard.append(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/agent", agent)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, f"127.0.0.1:{runner.addresses[0][1]}"


async def test_a_server_with_a_mirrors_certificate_is_refused_and_told_nothing(tmp_path, caplog):
    certs = Certs(tmp_path / "certs")
    files = certs.mirror("m2")
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(files["cert_file"], files["key_file"])
    heard: list[str] = []
    runner, address = await _agent_port(serving, heard)
    link = ClusterLink(node_id="n1", name="node1", control_planes=[address], ssl=certs.node_ssl("n1"),
                       hardware=None, shards=None)
    try:
        with caplog.at_level(logging.INFO, logger="llmgw.agent"):
            task = asyncio.create_task(link.run())
            for _ in range(200):
                if any("not a control plane's" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await runner.cleanup()
    said = [r.getMessage() for r in caplog.records if address in r.getMessage()]
    assert said and said[0] == (f"control plane {address}: it showed a certificate from the cluster's CA that is not "
                                "a control plane's; check that this address is a control plane's agent port and not "
                                "a model mirror's")
    assert heard == [] and not link.connected.is_set()
