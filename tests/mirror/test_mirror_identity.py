"""A mirror on a machine of its own, with a mirror's certificate from the cluster CA (`llmgw mirror add-peer`): it
reads another mirror as a node does, keeps in step with it, and changes only what it keeps itself."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest

from llmgw.mirror import MirrorClient, MirrorError
from tests.support.hfhub import Hub, gguf_bytes
from tests.support.mirrors import Certs, mirror_config, running_mirror

REFUSED = "only a control plane (or `llmgw mirror` on the mirror's machine) may change what the mirror keeps"


@pytest.fixture
async def hub():
    hub = Hub()
    hub.repo("acme/tiny", files={"config.json": b'{"model_type": "llama"}', "tiny.gguf": gguf_bytes()})
    await hub.start()
    yield hub
    await hub.stop()


async def _status(base: str, path: str, context: ssl.SSLContext) -> int:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session, \
            session.get(base + path) as r:
        await r.read()
        return r.status


async def _refused(call) -> str:
    with pytest.raises(MirrorError) as refused:
        await call
    assert refused.value.status == 403
    return str(refused.value)


async def test_another_mirror_reads_the_list_and_the_files_but_cannot_change_what_is_kept(tmp_path, hub):
    certs = Certs(tmp_path / "certs")
    cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)
    commit = hub.repos["acme/tiny"].main
    async with running_mirror(cfg) as (_, base):
        await MirrorClient(base, certs.control_plane_ssl("cp1")).add("hf:acme/tiny/tiny.gguf")
        peer = MirrorClient(base, certs.mirror_ssl("m2"))
        assert [row["key"].rsplit("/", 1)[1] for row in (await peer.state())["held"]] == ["tiny.gguf"]
        assert [row["path"] for row in (await peer.files())["files"]] == ["tiny.gguf"]
        assert await _status(base, f"/acme/tiny/resolve/{commit}/tiny.gguf", certs.mirror_ssl("m2")) == 200

        assert await _refused(peer.add("hf:acme/tiny/config.json")) == REFUSED
        assert await _refused(peer.remove(f"acme/tiny/{commit}/tiny.gguf")) == REFUSED
        assert await _refused(peer.want([])) == REFUSED
        assert await _refused(peer.import_dir(str(tmp_path))) == REFUSED
        assert [row["key"].rsplit("/", 1)[1] for row in (await peer.state())["held"]] == ["tiny.gguf"]


async def test_a_mirror_on_its_own_certificate_is_changed_by_its_own_cli_and_by_no_other_mirror_or_node(
        tmp_path, hub):
    certs = Certs(tmp_path / "certs")
    cfg = mirror_config(tmp_path / "m2", tmp_path / "no-control-plane-here", hub.url, tls=certs.mirror("m2"))
    async with running_mirror(cfg) as (mirror, base):
        assert mirror.own_identity == ("mirror", "m2")
        # `llmgw mirror add` on its machine dials with mirror.yaml's tls: the mirror's own certificate.
        added = await MirrorClient(base, certs.mirror_ssl("m2")).add("hf:acme/tiny/tiny.gguf")
        assert [key.rsplit("/", 1)[1] for key in added["added"]] == ["tiny.gguf"]
        assert await _refused(MirrorClient(base, certs.mirror_ssl("m3")).add("hf:acme/tiny/config.json")) == REFUSED
        assert await _refused(MirrorClient(base, certs.node_ssl("n1")).add("hf:acme/tiny/config.json")) == REFUSED
        # A control plane tells it the catalog's pins.
        assert (await MirrorClient(base, certs.control_plane_ssl("cp1")).want([]))["missing"] == 0
        assert (await MirrorClient(base, certs.node_ssl("n1")).health())["ok"] is True


async def test_a_mirror_on_its_own_certificate_keeps_in_step_with_one_on_a_control_planes_both_ways(tmp_path, hub):
    certs = Certs(tmp_path / "certs")
    first_cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)
    async with running_mirror(first_cfg) as (first, first_url):
        await MirrorClient(first_url, certs.control_plane_ssl("cp1")).add("hf:acme/tiny/tiny.gguf")
        # The second's hub is nowhere: what it has, it has from the first, read with its mirror's certificate.
        second_cfg = mirror_config(tmp_path / "m2", tmp_path / "none", "http://127.0.0.1:9", [first_url],
                                   tls=certs.mirror("m2"))
        async with running_mirror(second_cfg) as (second, second_url):
            for _ in range(600):
                if second.holdings.held:
                    break
                await asyncio.sleep(0.05)
            assert [h.path for h in second.holdings.held.values()] == ["tiny.gguf"]
            assert second.peers[first_url]["ok"] is True
            # And the first, told of the second, reads it with its control plane's certificate.
            assert first.set_peers([second_url]) is True
            for _ in range(600):
                if first.peers[second_url]["ok"] is not None:
                    break
                await asyncio.sleep(0.05)
            assert first.peers[second_url] == {"ok": True, "at": first.peers[second_url]["at"], "error": ""}
            assert first.set_peers([second_url + "/"]) is False
