"""Two mirrors kept in step, and files carried in on a disk: each copy checked, removals followed even by a mirror
that was down when they were made."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from llmgw.mirror import MirrorClient
from llmgw.mirror.peers import step
from tests.support.hfhub import Hub, big_file, gguf_bytes
from tests.support.mirrors import Certs, mirror_config, running_mirror

WEIGHTS = big_file(1_500_000, seed=3)


@pytest.fixture
async def hub():
    hub = Hub()
    hub.repo("acme/tiny", files={"config.json": b'{"model_type": "llama"}', "tiny.gguf": gguf_bytes(),
                                 "big.onnx": WEIGHTS})
    await hub.start()
    yield hub
    await hub.stop()


async def _until(check, seconds: float = 30) -> None:
    """Wait for what a mirror's own loop does (it reads its peer at its start, then every peer_interval)."""
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the mirror did not get there in time")


async def test_a_peer_copies_what_the_other_has_checked_and_removes_what_it_removed_while_it_was_down(
        tmp_path, hub):
    certs = Certs(tmp_path / "certs")
    first_cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)
    commit = hub.repos["acme/tiny"].main
    async with running_mirror(first_cfg) as (first, first_url):
        admin = MirrorClient(first_url, certs.control_plane_ssl("cp1"))
        await admin.add("hf:acme/tiny/big.onnx")
        await admin.add("hf:acme/tiny/tiny.gguf")
        # The second's hub is nowhere: what it has, it has from the first.
        second_cfg = mirror_config(tmp_path / "m2", certs.control_plane("cp2"), "http://127.0.0.1:9", [first_url])
        async with running_mirror(second_cfg) as (second, _):
            await _until(lambda: len(second.holdings.held) == 2)
            assert {h.path: (h.sha256, h.origin) for h in second.holdings.held.values()} == {
                h.path: (h.sha256, first_url) for h in first.holdings.held.values()}
            assert (tmp_path / "m2" / "files" / "acme/tiny" / commit / "big.onnx").read_bytes() == WEIGHTS
        # The second is down while the first removes a file ...
        await admin.remove(f"acme/tiny/{commit}/tiny.gguf")
        async with running_mirror(second_cfg) as (second, second_url):
            # ... and removes it once it is back, at its first read of the first;
            await _until(lambda: len(second.holdings.held) == 1)
            assert [h.path for h in second.holdings.held.values()] == ["big.onnx"]
            assert not (tmp_path / "m2" / "files" / "acme/tiny" / commit / "tiny.gguf").exists()
            # the first, reading the second, copies nothing back.
            assert await step(first, second_url) == {"copying": [], "removed": []}
    # Only the first mirror read the hub, once a file.
    assert hub.bytes_served("*/big.onnx") == len(WEIGHTS)


async def test_a_peer_copy_that_differs_from_the_pin_is_not_taken(tmp_path, hub):
    certs = Certs(tmp_path / "certs")
    commit = hub.repos["acme/tiny"].main
    first_cfg = mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)
    async with running_mirror(first_cfg) as (first, first_url):
        await MirrorClient(first_url, certs.control_plane_ssl("cp1")).add("hf:acme/tiny/big.onnx")
        # The bytes on the first mirror's disk changed under it (a bad disk, a hand).
        kept = tmp_path / "m1" / "files" / "acme/tiny" / commit / "big.onnx"
        kept.write_bytes(big_file(len(WEIGHTS), seed=4))
        second_cfg = mirror_config(tmp_path / "m2", certs.control_plane("cp2"), hub.url, [first_url])
        async with running_mirror(second_cfg) as (second, _):
            name = f"acme/tiny/{commit}/big.onnx"
            await _until(lambda: getattr(second.fetcher.progress.get(name), "phase", "") == "failed")
            assert second.holdings.held == {}
            failed = second.fetcher.progress[name]
            assert failed.phase == "failed" and hashlib.sha256(WEIGHTS).hexdigest() in failed.error


def _hf_cache(hub: Hub, folder) -> str:
    """What `huggingface-cli download` leaves: the public client's own cache of the repository."""
    from huggingface_hub import snapshot_download

    with hub.threaded():
        return snapshot_download("acme/tiny", cache_dir=str(folder), endpoint=hub.url, token=False)


async def test_an_air_gapped_import_of_a_hugging_face_cache_checks_each_file_and_refuses_one_that_differs(
        tmp_path):
    hub = Hub()
    hub.repo("acme/tiny", files={"config.json": b'{"model_type": "llama"}', "big.onnx": WEIGHTS})
    commit = hub.repos["acme/tiny"].main
    snapshot = _hf_cache(hub, tmp_path / "disk")
    # One blob damaged on the way in.
    blob = (tmp_path / "disk" / "models--acme--tiny" / "blobs" / hashlib.sha256(WEIGHTS).hexdigest())
    blob.write_bytes(WEIGHTS[:-1] + b"\0")
    certs = Certs(tmp_path / "certs")
    cfg = mirror_config(tmp_path / "mirror", certs.control_plane("cp1"), "http://127.0.0.1:9")
    async with running_mirror(cfg) as (mirror, base):
        report = await MirrorClient(base, certs.control_plane_ssl("cp1")).import_dir(str(tmp_path / "disk"))
    assert sorted(report["imported"]) == [f"acme/tiny/{commit}/.gitattributes", f"acme/tiny/{commit}/config.json"]
    [refused] = report["refused"]
    assert refused["file"] == f"acme/tiny/{commit}/big.onnx"
    assert hashlib.sha256(WEIGHTS).hexdigest() in refused["why"]
    assert not (tmp_path / "mirror" / "files" / "acme/tiny" / commit / "big.onnx").exists()
    assert snapshot.endswith(commit)


async def test_an_import_with_a_manifest_is_checked_against_the_catalogs_pin(tmp_path):
    certs = Certs(tmp_path / "certs")
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "model.gguf").write_bytes(WEIGHTS)
    commit = "c" * 40
    (disk / "manifest.json").write_text(json.dumps({"files": [
        {"repo": "acme/tiny", "commit": commit, "path": "model.gguf", "sha256": hashlib.sha256(WEIGHTS).hexdigest()},
        {"repo": "acme/tiny", "commit": commit, "path": "escape.gguf", "file": "../outside.gguf",
         "sha256": "0" * 64}]}))
    cfg = mirror_config(tmp_path / "mirror", certs.control_plane("cp1"), "http://127.0.0.1:9")
    async with running_mirror(cfg) as (mirror, base):
        admin = MirrorClient(base, certs.control_plane_ssl("cp1"))
        # The catalog pinned other bytes for that file: the manifest's word does not beat the pin.
        await admin.want([{"repo": "acme/tiny", "commit": commit, "path": "model.gguf", "sha256": "e" * 64,
                           "models": ["tiny"]}])
        report = await admin.import_dir(str(disk))
        assert report["imported"] == []
        assert [r["file"] for r in report["refused"]] == [f"acme/tiny/{commit}/escape.gguf",
                                                          f"acme/tiny/{commit}/model.gguf"]
        assert "e" * 64 in report["refused"][1]["why"]
        await admin.want([])
        report = await admin.import_dir(str(disk))
        assert report["imported"] == [f"acme/tiny/{commit}/model.gguf"]


async def test_a_cache_whose_link_leads_outside_its_repository_is_refused_and_nothing_of_it_kept(tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"not a model\n")
    snapshot = tmp_path / "disk" / "models--acme--tiny" / "snapshots" / ("d" * 40)
    snapshot.mkdir(parents=True)
    # Named for the sum of what it points at, so the sum alone would pass.
    (snapshot / "model.gguf").symlink_to(secret)
    blob_name = hashlib.sha256(secret.read_bytes()).hexdigest()
    (snapshot / "other.gguf").symlink_to(tmp_path / "disk" / "models--acme--tiny" / "blobs" / blob_name)
    (tmp_path / "disk" / "models--acme--tiny" / "blobs").mkdir()
    (tmp_path / "disk" / "models--acme--tiny" / "blobs" / blob_name).symlink_to(secret)
    certs = Certs(tmp_path / "certs")
    cfg = mirror_config(tmp_path / "mirror", certs.control_plane("cp1"), "http://127.0.0.1:9")
    async with running_mirror(cfg) as (mirror, base):
        report = await MirrorClient(base, certs.control_plane_ssl("cp1")).import_dir(str(tmp_path / "disk"))
    assert report["imported"] == []
    assert sorted(r["file"].rsplit("/", 1)[1] for r in report["refused"]) == ["model.gguf", "other.gguf"]
    assert all("links outside" in r["why"] for r in report["refused"])
    assert not [p for p in (tmp_path / "mirror" / "files").rglob("*") if p.is_file()]
