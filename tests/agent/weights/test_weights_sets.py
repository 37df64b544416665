"""A model of several files: into one directory, its progress the whole set's, each file checked."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from llmgw.agent.weights import ChecksumMismatch, FetchFailed

A = os.urandom(600_000)
B = os.urandom(400_000)
CONFIG = b'{"architectures": ["Qwen3ForCausalLM"]}'


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


MANIFEST = {
    "model-00001-of-00002.safetensors": sha(A),
    "sub/model-00002-of-00002.safetensors": sha(B),
    "config.json": sha(CONFIG),
}


@pytest.fixture
def mirrored(origin):
    origin.files["/m/v/model-00001-of-00002.safetensors"] = A
    origin.files["/m/v/sub/model-00002-of-00002.safetensors"] = B
    origin.files["/m/v/config.json"] = CONFIG
    return origin.url + "/m/v/"


async def test_a_set_lands_in_one_directory_with_the_whole_sets_progress(weights, mirrored, cache_dir):
    seen = []

    directory = Path(await weights.fetch(mirrored, files=MANIFEST, on_progress=seen.append))

    assert (directory / "model-00001-of-00002.safetensors").read_bytes() == A
    assert (directory / "sub" / "model-00002-of-00002.safetensors").read_bytes() == B
    assert (directory / "config.json").read_bytes() == CONFIG
    assert cache_dir in directory.parents
    whole = len(A) + len(B) + len(CONFIG)
    assert {p.bytes_total for p in seen} == {whole}
    fetching = [p.bytes_done for p in seen if p.phase == ""]
    assert fetching == sorted(fetching) and fetching[-1] == whole
    assert seen[-1].phase == "checking" and seen[-1].bytes_done == whole


async def test_a_finished_set_is_not_fetched_again_and_a_half_one_carries_on(weights, mirrored, origin):
    origin.cut["/m/v/sub/model-00002-of-00002.safetensors"] = 100_000
    await weights.fetch(mirrored, files=MANIFEST)
    gets = len(origin.gets())
    assert origin.gets("/m/v/sub/model-00002-of-00002.safetensors")[-1].range == "bytes=100000-"

    await weights.fetch(mirrored, files=MANIFEST)

    assert len(origin.gets()) == gets


async def test_a_set_file_that_is_not_the_catalogs_is_deleted_and_the_rest_kept(weights, mirrored, origin):
    origin.files["/m/v/config.json"] = b"{}"

    with pytest.raises(ChecksumMismatch) as refused:
        await weights.fetch(mirrored, files=MANIFEST)

    assert f"config.json arrived with sha256 {sha(b'{}')}, and the catalog gives {sha(CONFIG)}" in str(refused.value)
    directory = Path(weights.cached_path(mirrored))
    assert not (directory / "config.json").exists()
    assert (directory / "model-00001-of-00002.safetensors").exists()

    origin.files["/m/v/config.json"] = CONFIG
    before = len(origin.gets())
    await weights.fetch(mirrored, files=MANIFEST)
    assert [s.path for s in origin.gets()[before:]] == ["/m/v/config.json"]


async def test_a_set_file_the_source_lacks_fails_the_set_before_any_byte(weights, mirrored, origin):
    with pytest.raises(FetchFailed) as refused:
        await weights.fetch(mirrored, files={**MANIFEST, "tokenizer.json": ""})

    assert "tokenizer.json answered 404" in str(refused.value)
    assert origin.gets() == []  # only HEADs were asked


async def test_shards_waiting_on_one_set_share_its_download(weights, mirrored, origin):
    paths = await asyncio.gather(*(weights.fetch(mirrored, files=MANIFEST) for _ in range(4)))

    assert len(set(paths)) == 1
    assert len(origin.gets()) == 3


async def test_a_fresh_nodes_first_set_is_fetched_though_its_cache_folder_is_not_made_yet(origin, mirrored, tmp_path):
    # The set's room was measured on the cache folder before anything had made it: a new node's first model of
    # several files was refused as "could not be written … (No such file or directory)".
    from llmgw.agent.weights import Weights

    fresh = tmp_path / "not-yet" / "cache"
    weights = Weights(fresh, progress_interval=0)
    try:
        directory = Path(await weights.fetch(mirrored, files=MANIFEST))
    finally:
        await weights.close()
    assert (directory / "config.json").read_bytes() == CONFIG and fresh in directory.parents
