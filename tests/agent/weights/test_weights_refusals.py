"""What a node refuses: a file that is not the catalog's, a pickle, a name leading out of the cache."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llmgw.agent.weights import ChecksumMismatch, PickleRefused, UnsafeName, WeightsError, is_pickle

BODY = b"the weights as published" * 1000
SUM = hashlib.sha256(BODY).hexdigest()


async def test_a_file_whose_sha256_differs_is_refused_naming_both_sums_and_deleted(weights, origin, cache_dir):
    origin.files["/m.gguf"] = b"weights someone replaced"
    got = hashlib.sha256(b"weights someone replaced").hexdigest()

    with pytest.raises(ChecksumMismatch) as refused:
        await weights.fetch(origin.url + "/m.gguf", sha256=SUM.upper())

    assert got in str(refused.value) and SUM in str(refused.value)
    assert str(refused.value).startswith(f"{origin.url}/m.gguf arrived with sha256 {got}")
    assert (refused.value.got, refused.value.want) == (got, SUM)
    assert [p for p in cache_dir.rglob("*") if p.is_file()] == []


async def test_a_cached_file_checked_as_another_is_refused_and_left(weights, origin):
    origin.files["/m.gguf"] = BODY
    path = await weights.fetch(origin.url + "/m.gguf", sha256=SUM)

    with pytest.raises(ChecksumMismatch) as refused:
        await weights.fetch(origin.url + "/m.gguf", sha256="0" * 64)

    assert f"has sha256 {SUM}, as fetched, and the catalog gives {'0' * 64}" in str(refused.value)
    assert Path(path).read_bytes() == BODY  # another model may be serving it
    assert len(origin.gets()) == 1


async def test_a_cached_file_not_yet_checked_is_checked_once_then_trusted(weights, origin):
    origin.files["/m.gguf"] = BODY
    source = origin.url + "/m.gguf"
    await weights.fetch(source)  # no sum given: nothing to check against
    kept = Path(weights.cached_path(source)).with_name(".m.gguf.sha256")
    assert not kept.exists()
    seen = []

    await weights.fetch(source, sha256=SUM, on_progress=seen.append)

    assert kept.read_text().split()[0] == SUM
    assert [p.phase for p in seen][-1] == "checking"
    assert len(origin.gets()) == 1


@pytest.mark.parametrize("name", [
    "/model.bin", "/x.pt?download=1", "/w.PTH", "/a.ckpt#frag", "/a.pkl", "/m.pt2", "/m%2Ebin",
])
async def test_a_pickle_source_is_refused_before_any_request_reaches_the_server(weights, origin, name):
    origin.files[name.split("?")[0].split("#")[0]] = b"not really a pickle"

    with pytest.raises(PickleRefused) as refused:
        await weights.fetch(origin.url + name)

    assert origin.seen == []
    assert "nothing was fetched" in str(refused.value) and "allow_pickle: true" in str(refused.value)


async def test_a_pickle_the_model_allows_is_fetched(weights, origin):
    origin.files["/model.ckpt"] = BODY

    path = await weights.fetch(origin.url + "/model.ckpt", sha256=SUM, allow_pickle=True)

    assert Path(path).read_bytes() == BODY


async def test_hf_and_mirror_pickles_are_refused_too(weights, origin):
    for source in ["hf:org/repo/model.bin@abc", "hf:o/r/model.ckpt?download=true", "mirror:m/v/x.pt#y"]:
        with pytest.raises(PickleRefused):
            await weights.fetch(source)
    assert origin.seen == []


async def test_a_set_holding_a_pickle_is_refused_whole_before_any_request(weights, origin):
    with pytest.raises(PickleRefused) as refused:
        await weights.fetch(origin.url + "/m/v/", files={"model.safetensors": "", "pytorch_model.bin": ""})

    assert "pytorch_model.bin in the set at" in str(refused.value)
    assert origin.seen == []


def test_pickle_formats_are_known_by_their_names_however_hidden():
    for name in ["pytorch_model.bin", "x.PT", "https://h/r/resolve/main/model.ckpt?download=true",
                 "hf:o/r/model.bin@main", "hf:o/r/model.pt@refs/pr/1", "m.pickle", "w.bin/"]:
        assert is_pickle(name), name
    for name in ["model.safetensors", "m-Q4_K_M.gguf", "Qwen/Qwen2.5-7B-Instruct", "config.json",
                 "hf:o/r/model.gguf@binary", "https://h/x.gguf?f=a.bin", ""]:
        assert not is_pickle(name), name


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "a\\..\\x", "sub/./x", "", "a//b"])
async def test_a_set_naming_a_file_outside_its_directory_is_refused(weights, origin, cache_dir, name):
    with pytest.raises(UnsafeName) as refused:
        await weights.fetch(origin.url + "/m/v/", files={"config.json": "", name: ""})

    assert f"names a file {name!r}" in str(refused.value)
    assert "nothing was fetched" in str(refused.value)
    assert origin.seen == []
    assert list(cache_dir.iterdir()) == []


@pytest.mark.parametrize("source", [
    "/%2e%2e/%2e%2e/etc/passwd.gguf", "/a/%2E%2E/%2E%2E/%2E%2E/x.gguf", "/.x.gguf.part",
])
async def test_a_source_whose_path_leads_out_of_the_cache_is_refused(weights, origin, source):
    with pytest.raises(UnsafeName):
        await weights.fetch(origin.url + source)
    assert origin.seen == []


async def test_a_link_in_the_cache_to_elsewhere_is_not_followed(weights, origin, cache_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    host = origin.url.split("://")[1].replace(":", "_")
    (cache_dir / "http").mkdir()
    os.symlink(outside, cache_dir / "http" / host)
    origin.files["/m.gguf"] = BODY

    with pytest.raises(UnsafeName) as refused:
        await weights.fetch(origin.url + "/m.gguf")

    assert "outside the cache directory" in str(refused.value)
    assert list(outside.iterdir()) == []
    assert origin.seen == []


async def test_a_source_the_node_does_not_know_says_what_it_takes(weights):
    with pytest.raises(WeightsError) as refused:
        await weights.fetch("ftp://h/m.gguf")
    assert "give an absolute path, an http(s):// address, hf:org/repo/file[@revision], or mirror:" in str(
        refused.value)


async def test_a_sha256_that_is_not_one_is_refused_before_the_download(weights, origin):
    origin.files["/m.gguf"] = BODY
    with pytest.raises(WeightsError) as refused:
        await weights.fetch(origin.url + "/m.gguf", sha256="abc123")
    assert "is 'abc123', which is not one (64 hex digits)" in str(refused.value)
    assert origin.seen == []
    assert await weights.fetch(origin.url + "/m.gguf", sha256="sha256:" + SUM)
