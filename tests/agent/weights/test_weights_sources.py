"""The kinds of source: Hugging Face, the mirror, a path on the node, an id the engine fetches."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmgw.agent.weights import ChecksumMismatch, FetchFailed, HfFetcher, NotLocal, Weights
from llmgw.mirror import MirrorClient
from llmgw.protocol.messages import EngineProfile
from tests.support.hfhub import Hub
from tests.support.mirrors import Certs, mirror_config, running_mirror

BODY = b"GGUF" + bytes(range(256)) * 400
SUM = hashlib.sha256(BODY).hexdigest()


def test_hf_sources_map_to_the_resolve_url():
    hf = HfFetcher("https://hub.example/")
    assert hf.url("hf:Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf") == (
        "https://hub.example/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf")
    assert hf.url("hf:org/repo/sub dir/f.gguf@3f2a9c1") == (
        "https://hub.example/org/repo/resolve/3f2a9c1/sub%20dir/f.gguf")
    assert hf.url("hf:org/repo/f.gguf@refs/pr/1") == "https://hub.example/org/repo/resolve/refs%2Fpr%2F1/f.gguf"
    assert hf.url("hf:org/repo@abc", "model-00001-of-00002.safetensors") == (
        "https://hub.example/org/repo/resolve/abc/model-00001-of-00002.safetensors")


async def test_an_hf_source_is_fetched_from_the_hubs_resolve_url_with_the_token(cache_dir, origin, tmp_path):
    origin.files["/org/repo/resolve/abc123/model.gguf"] = BODY
    token = tmp_path / "hf-token"
    token.write_text("hf_secret\n")
    w = Weights(cache_dir, hf_endpoint=origin.url, hf_token_file=str(token))
    try:
        path = await w.fetch("hf:org/repo/model.gguf@abc123", sha256=SUM)
    finally:
        await w.close()

    assert Path(path).read_bytes() == BODY
    assert Path(path) == cache_dir / "hf" / "org" / "repo" / "abc123" / "model.gguf"
    assert origin.gets()[0].authorization == "Bearer hf_secret"


async def test_a_gated_hf_repository_says_what_to_do_about_the_token(weights, origin):
    origin.status["/org/gated/resolve/main/model.gguf"] = 401

    with pytest.raises(FetchFailed) as refused:
        await weights.fetch("hf:org/gated/model.gguf")

    assert str(refused.value).startswith("hf:org/gated/model.gguf answered 401 Unauthorized: the repository is gated")
    assert "give the node a token that may read it" in str(refused.value)


async def test_mirror_and_hf_sources_are_fetched_from_the_model_mirror_over_the_clusters_tls(cache_dir, tmp_path):
    hub = Hub()
    repo = hub.repo("acme/tiny", files={"model.onnx": BODY})
    certs = Certs(tmp_path / "certs")
    await hub.start()
    try:
        cfg = mirror_config(tmp_path / "mirror", certs.control_plane("cp1"), hub.url)
        async with running_mirror(cfg) as (_, base):
            await MirrorClient(base, certs.control_plane_ssl("cp1")).add("hf:acme/tiny/model.onnx")
            # A node whose own hub address leads nowhere: both sources come from the mirror.
            w = Weights(cache_dir, hf_endpoint="http://127.0.0.1:9", mirror_url=base,
                        mirror_ssl=certs.node_ssl("n1"))
            try:
                kept = await w.fetch(f"mirror:acme/tiny/{repo.main}/model.onnx", sha256=SUM)
                pinned = await w.fetch(f"hf:acme/tiny/model.onnx@{repo.main}", sha256=SUM)
            finally:
                await w.close()
    finally:
        await hub.stop()
    assert Path(kept) == cache_dir / "mirror" / "acme" / "tiny" / repo.main / "model.onnx"
    assert Path(pinned) == cache_dir / "hf" / "acme" / "tiny" / repo.main / "model.onnx"
    assert Path(kept).read_bytes() == Path(pinned).read_bytes() == BODY
    # The hub sent the bytes once, to the mirror.
    assert hub.bytes_served() == len(BODY)


async def test_a_mirror_source_on_a_node_without_a_mirror_says_so(cache_dir, origin):
    w = Weights(cache_dir)
    with pytest.raises(Exception) as refused:
        await w.fetch(f"mirror:acme/tiny/{'a' * 40}/model.gguf")
    assert "this node has no mirror address" in str(refused.value)
    assert "mirror.url" in str(refused.value)
    assert origin.seen == []


async def test_a_local_path_is_used_where_it_is_and_checked_once(weights, tmp_path, monkeypatch):
    model = tmp_path / "models" / "m.gguf"
    model.parent.mkdir()
    model.write_bytes(BODY)

    assert await weights.fetch(str(model), sha256=SUM) == str(model)
    from llmgw.hub import checksum
    hashed = []
    real = checksum.sha256_file
    monkeypatch.setattr(checksum, "sha256_file", lambda *a: hashed.append(a[0]) or real(*a))
    assert await weights.fetch(str(model), sha256=SUM) == str(model)
    assert hashed == []

    model.write_bytes(BODY[:-1] + b"x")  # changed since
    with pytest.raises(ChecksumMismatch) as refused:
        await weights.fetch(str(model), sha256=SUM)
    assert "refused and left where it is" in str(refused.value)
    assert model.exists()  # the operator's file, not the cache's to delete


async def test_a_missing_local_path_says_what_is_wrong(weights, tmp_path):
    with pytest.raises(NotLocal) as refused:
        await weights.fetch(str(tmp_path / "absent.gguf"))
    assert str(refused.value).startswith(f"the weights at {tmp_path / 'absent.gguf'} are not on this node")


async def test_a_bare_hub_id_is_left_to_the_engine(weights, origin):
    assert await weights.fetch("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    assert origin.seen == []


async def test_a_profile_brings_its_weights_and_an_engine_without_any_needs_none(weights, origin):
    origin.files["/m.gguf"] = BODY
    profile = EngineProfile(engine="llamacpp", model="m", source=origin.url + "/m.gguf", sha256=SUM)

    assert Path(await weights.fetch_profile(profile)).read_bytes() == BODY
    assert await weights.fetch_profile(EngineProfile(engine="sim", model="s")) == ""


async def test_an_hf_set_lands_in_the_revisions_directory(weights, origin, cache_dir):
    origin.files["/org/repo/resolve/abc/model.safetensors"] = BODY
    origin.files["/org/repo/resolve/abc/config.json"] = b"{}"

    directory = await weights.fetch("hf:org/repo@abc", files={"model.safetensors": SUM, "config.json": ""})

    assert Path(directory) == cache_dir / "hf" / "org" / "repo" / "abc"
    assert (Path(directory) / "model.safetensors").read_bytes() == BODY
