"""The Hugging Face Hub stand-in, as the public huggingface_hub client sees it.

Each test points the real client (HfApi, hf_hub_download, get_hf_file_metadata) at the stand-in and
asserts what it hands back, so that a gateway tested against the stand-in speaks to huggingface.co
the same way. A plain HTTP client checks what huggingface_hub does not show: the redirect and ranges.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import gguf
import huggingface_hub.constants
import numpy as np
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.numpy import load_file

from tests.support.hfhub import Hub, HubProcess, big_file, gguf_bytes, git_blob_oid, safetensors_bytes


@pytest.fixture
def hub() -> Iterator[Hub]:
    hub = Hub()
    with hub.threaded():
        yield hub


@pytest.fixture
def api(hub: Hub) -> HfApi:
    # token=False: never a token from this machine's login, which the stand-in would refuse as unknown.
    return HfApi(endpoint=hub.url, token=False)


def download(hub: Hub, cache: Path, repo_id: str, filename: str, revision: str | None = None,
             token: str | bool = False) -> Path:
    return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache, endpoint=hub.url,
                                token=token))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_model_info_gives_the_commit_and_each_lfs_files_sha256_and_size(hub: Hub, api: HfApi):
    weights = gguf_bytes()
    repo = hub.repo("acme/tiny", files={"config.json": b'{"a": 1}', "model.gguf": weights},
                    library_name="gguf", pipeline_tag="text-generation", tags=("llama",))

    info = api.model_info("acme/tiny", files_metadata=True)

    assert info.sha == repo.main and len(info.sha) == 40
    assert (info.id, info.author, info.private, info.gated) == ("acme/tiny", "acme", False, False)
    assert {"llama", "gguf", "text-generation"} <= set(info.tags)
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == {".gitattributes", "config.json", "model.gguf"}
    assert siblings["model.gguf"].lfs.sha256 == sha256(weights)
    assert siblings["model.gguf"].lfs.size == siblings["model.gguf"].size == len(weights)
    assert siblings["config.json"].lfs is None
    assert siblings["config.json"].blob_id == git_blob_oid(b'{"a": 1}')
    plain = {s.rfilename: s for s in api.model_info("acme/tiny").siblings}
    assert (plain["model.gguf"].lfs, plain["model.gguf"].size) == (None, None)  # only when asked for


def test_model_info_with_security_status_names_the_files_with_issues(hub: Hub, api: HfApi):
    hub.repo("acme/pickled", files={"model.bin": b"\x80\x04pickle", "model.safetensors": safetensors_bytes()},
             security={"model.bin": "unsafe"})

    assert api.model_info("acme/pickled", securityStatus=True).security_repo_status == {
        "scansDone": True, "filesWithIssues": [{"path": "model.bin", "level": "unsafe"}]}
    assert api.model_info("acme/pickled").security_repo_status is None


def test_the_tree_gives_each_files_sha256_last_commit_and_security(hub: Hub, api: HfApi):
    weights = safetensors_bytes()
    repo = hub.repo("acme/tree", files={"model.safetensors": weights, "old/model.bin": b"\x80\x04old"},
                    security={"old/model.bin": "suspicious"})
    first = repo.main
    second = repo.commit({"README.md": b"# tree"}, message="Add a model card")

    entries = {e.path: e for e in api.list_repo_tree("acme/tree", recursive=True, expand=True)}

    assert set(entries) == {".gitattributes", "README.md", "model.safetensors", "old", "old/model.bin"}
    assert entries["model.safetensors"].lfs.sha256 == sha256(weights)
    assert entries["model.safetensors"].size == len(weights)
    assert entries["model.safetensors"].last_commit.oid == first
    card = entries["README.md"]
    assert (card.last_commit.oid, card.last_commit.title) == (second, "Add a model card")
    assert card.blob_id == git_blob_oid(b"# tree") and card.lfs is None
    assert entries["model.safetensors"].security.safe is True
    assert entries["old/model.bin"].security.status == "suspicious"
    assert entries["old/model.bin"].security.pickle_import_scan["status"] == "suspicious"
    assert len(entries["old"].tree_id) == 40
    assert [e.path for e in api.list_repo_tree("acme/tree", "old")] == ["old/model.bin"]


def test_an_old_commit_still_gives_the_old_file_after_main_moves_on(hub: Hub, api: HfApi, tmp_path: Path):
    before, after = gguf_bytes(context_length=2048), gguf_bytes(context_length=4096)
    repo = hub.repo("acme/moving", files={"model.gguf": before})
    old = repo.main

    new = hub.replace("acme/moving", "model.gguf", after)

    assert new == repo.main != old
    assert api.model_info("acme/moving", revision=old, files_metadata=True).siblings[1].lfs.sha256 == sha256(before)
    assert api.model_info("acme/moving", files_metadata=True).siblings[1].lfs.sha256 == sha256(after)
    assert api.model_info("acme/moving", revision=old[:7]).sha == old
    assert [e.lfs.sha256 for e in api.list_repo_tree("acme/moving", revision=old) if e.lfs] == [sha256(before)]
    assert download(hub, tmp_path, "acme/moving", "model.gguf", revision=old).read_bytes() == before
    assert download(hub, tmp_path, "acme/moving", "model.gguf").read_bytes() == after


def test_a_download_pinned_to_a_commit_writes_its_exact_bytes_once(hub: Hub, api: HfApi, tmp_path: Path):
    weights = big_file(2 * 1024 * 1024)
    repo = hub.repo("acme/pinned", files={"config.json": b"{}", "model.bin": weights})
    pinned = repo.main
    hub.replace("acme/pinned", "model.bin", big_file(1024, seed=1))

    path = download(hub, tmp_path, "acme/pinned", "model.bin", revision=pinned)
    download(hub, tmp_path, "acme/pinned", "config.json", revision=pinned)
    again = download(hub, tmp_path, "acme/pinned", "model.bin", revision=pinned)

    assert path == again and path.read_bytes() == weights
    assert path.parent.name == pinned and path.resolve().name == sha256(weights)
    checked = api.verify_repo_checksums("acme/pinned", revision=pinned, cache_dir=tmp_path)
    assert (checked.checked_count, checked.mismatches) == (2, [])
    assert hub.count("cdn", method="GET") == 1  # the second call found the pinned file in its cache
    assert hub.bytes_served("*/model.bin") == len(weights)


def test_file_metadata_gives_the_commit_the_etag_and_the_size(hub: Hub):
    weights = gguf_bytes()
    repo = hub.repo("acme/meta", files={"model.gguf": weights, "tokenizer.json": b'{"v": 1}'})

    lfs = get_hf_file_metadata(hf_hub_url("acme/meta", "model.gguf", endpoint=hub.url), token=False)
    plain = get_hf_file_metadata(hf_hub_url("acme/meta", "tokenizer.json", endpoint=hub.url), token=False)

    assert (lfs.commit_hash, lfs.etag, lfs.size) == (repo.main, sha256(weights), len(weights))
    assert lfs.location.startswith(hub.cdn_url + "/cdn/") and lfs.xet_file_data is None
    assert (plain.commit_hash, plain.etag, plain.size) == (repo.main, git_blob_oid(b'{"v": 1}'), 8)
    assert plain.location == hf_hub_url("acme/meta", "tokenizer.json", endpoint=hub.url)


async def test_an_lfs_file_resolves_to_a_redirect_that_carries_its_sha256_and_size():
    hub = await Hub().start()
    try:
        weights = gguf_bytes()
        repo = hub.repo("acme/redirect", files={"model.gguf": weights})
        async with aiohttp.ClientSession() as http:
            async with http.head(f"{hub.url}/acme/redirect/resolve/main/model.gguf", allow_redirects=False) as r:
                assert r.status == 302
                assert r.headers["X-Repo-Commit"] == repo.main
                assert r.headers["X-Linked-Etag"] == f'"{sha256(weights)}"'
                assert r.headers["X-Linked-Size"] == str(len(weights))
                assert r.headers["Location"].startswith(hub.cdn_url)
                assert "X-Xet-Hash" not in r.headers
            async with http.get(f"{hub.url}/acme/redirect/resolve/main/model.gguf") as r:
                assert (r.status, await r.read()) == (200, weights)
                assert r.headers["ETag"] == f'"{sha256(weights)}"'
    finally:
        await hub.stop()


async def test_a_range_request_resumes_where_a_download_stopped():
    hub = await Hub().start()
    try:
        weights = big_file(300_000)
        hub.repo("acme/ranges", files={"model.bin": weights, "config.json": b'{"hidden": 64}'})
        url = f"{hub.url}/acme/ranges/resolve/main/model.bin"
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers={"Range": "bytes=0-99999"}) as r:
                assert r.status == 206 and r.headers["Content-Range"] == "bytes 0-99999/300000"
                head = await r.read()
            async with http.get(url, headers={"Range": "bytes=100000-"}) as r:
                assert r.status == 206 and r.headers["Content-Length"] == "200000"
                assert r.headers["Accept-Ranges"] == "bytes"
                assert head + await r.read() == weights
            async with http.get(url, headers={"Range": "bytes=300000-"}) as r:
                assert (r.status, r.headers["Content-Range"]) == (416, "bytes */300000")
            plain = f"{hub.url}/acme/ranges/resolve/main/config.json"
            async with http.get(plain, headers={"Range": "bytes=-3"}) as r:
                assert (r.status, await r.read()) == (206, b"64}")
    finally:
        await hub.stop()


async def test_a_stalled_download_pauses_then_arrives_whole():
    hub = await Hub().start()
    try:
        weights = big_file(200_000, seed=2)
        hub.repo("acme/slow", files={"model.bin": weights})
        hub.stall_next("/cdn/*", after_bytes=50_000, seconds=0.3)
        async with aiohttp.ClientSession() as http:
            started = time.monotonic()
            async with http.get(f"{hub.url}/acme/slow/resolve/main/model.bin") as r:
                assert await r.read() == weights
            assert time.monotonic() - started >= 0.3
    finally:
        await hub.stop()


def test_a_download_cut_midway_is_resumed_by_the_client_from_where_it_stopped(hub: Hub, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    # The client counts only the bytes it has written, and it writes in 10 MiB chunks: cut before
    # 10 MiB, it starts again from 0. Smaller chunks show the ranged resume without a 10 MiB file.
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 100_000)
    weights = big_file(1024 * 1024, seed=7)
    hub.repo("acme/cut-midway", files={"model.bin": weights})
    hub.cut_next("/cdn/*", after_bytes=300_000)

    assert download(hub, tmp_path, "acme/cut-midway", "model.bin").read_bytes() == weights
    assert [h.range for h in hub.hits if h.kind == "cdn"] == [None, "bytes=300000-"]
    assert hub.bytes_served("/cdn/*") == len(weights)


def test_an_unknown_repo_revision_or_file_raises_the_clients_not_found_errors(hub: Hub, api: HfApi,
                                                                              tmp_path: Path):
    hub.repo("acme/known", files={"config.json": b"{}"})

    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/unknown")
    with pytest.raises(RevisionNotFoundError):
        api.model_info("acme/known", revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree("acme/known", revision="no-such-branch"))
    with pytest.raises(RevisionNotFoundError):
        download(hub, tmp_path, "acme/known", "config.json", revision="no-such-branch")
    with pytest.raises(RemoteEntryNotFoundError):
        download(hub, tmp_path, "acme/known", "missing.json")
    with pytest.raises(RepositoryNotFoundError) as unknown:
        download(hub, tmp_path, "acme/unknown", "config.json")
    assert unknown.value.response.status_code == 401  # anonymous, as the Hub answers


def test_a_gated_repo_refuses_a_download_without_a_token_and_serves_one_with(hub: Hub, api: HfApi,
                                                                             tmp_path: Path):
    hub.repo("acme/gated", files={"model.gguf": gguf_bytes()}, gated=True)
    token = hub.token()
    elsewhere = hub.token(repos=["acme/other"])

    assert api.model_info("acme/gated").gated == "manual"  # its card and files list are public
    with pytest.raises(GatedRepoError) as anonymous:
        download(hub, tmp_path, "acme/gated", "model.gguf")
    with pytest.raises(GatedRepoError) as not_listed:
        download(hub, tmp_path, "acme/gated", "model.gguf", token=elsewhere)
    assert (anonymous.value.response.status_code, not_listed.value.response.status_code) == (401, 403)
    assert gguf.GGUFReader(download(hub, tmp_path, "acme/gated", "model.gguf", token=token)).tensors


def test_a_private_repo_is_not_found_without_a_token_and_is_with_one(hub: Hub, api: HfApi):
    hub.repo("acme/secret", files={"config.json": b"{}"}, private=True)
    token = hub.token()

    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/secret")
    assert [m.id for m in api.list_models(author="acme")] == []
    assert api.model_info("acme/secret", token=token).private is True
    assert [m.id for m in api.list_models(author="acme", token=token)] == ["acme/secret"]


def test_list_models_finds_a_repo_by_search_and_author_across_pages(hub: Hub, api: HfApi):
    hub.models_page_size = 2
    for name in ("llama-a", "llama-b", "llama-c", "mistral"):
        hub.repo(f"acme/{name}", files={"model.gguf": gguf_bytes()}, library_name="gguf")
    hub.repo("other/llama-d", files={"model.safetensors": safetensors_bytes()}, library_name="transformers")

    found = [m.id for m in api.list_models(search="llama", author="acme")]
    pages = hub.count("models")
    first_two = [m.id for m in api.list_models(author="acme", limit=2, full=True)]

    assert found == ["acme/llama-a", "acme/llama-b", "acme/llama-c"] and pages == 2
    assert first_two == ["acme/llama-a", "acme/llama-b"] and hub.count("models") == pages + 1
    assert [m.id for m in api.list_models(filter="transformers")] == ["other/llama-d"]
    full = next(iter(api.list_models(search="mistral", full=True)))
    assert (full.sha, [s.rfilename for s in full.siblings]) == (hub.repos["acme/mistral"].main,
                                                                [".gitattributes", "model.gguf"])
    assert next(iter(api.list_models(search="mistral"))).siblings is None


def test_list_repo_tree_returns_every_entry_across_pages(hub: Hub, api: HfApi):
    hub.tree_page_size, hub.expanded_tree_page_size = 10, 4
    files = {f"shards/part-{i:02}.txt": str(i).encode() for i in range(23)}
    hub.repo("acme/many", files=files)

    listed = [e.path for e in api.list_repo_tree("acme/many", recursive=True)]
    pages = hub.count("tree")
    expanded = [e.path for e in api.list_repo_tree("acme/many", "shards", expand=True)]

    assert sorted(listed) == sorted([".gitattributes", "shards", *files]) and len(set(listed)) == 25
    assert pages == 3
    assert expanded == sorted(files) and hub.count("tree") == pages + 6


def test_the_gguf_and_safetensors_served_parse_back_and_are_summarised(hub: Hub, api: HfApi, tmp_path: Path):
    tensors = {"embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "bias": np.zeros(5, np.float16)}
    hub.repo("acme/gguf", files={"tiny.gguf": gguf_bytes(context_length=4096, block_count=3, parameters=1000)})
    hub.repo("acme/st", files={"model.safetensors": safetensors_bytes(tensors)})

    reader = gguf.GGUFReader(download(hub, tmp_path, "acme/gguf", "tiny.gguf"))
    loaded = load_file(download(hub, tmp_path, "acme/st", "model.safetensors"))

    fields = {key: field.contents() for key, field in reader.fields.items()}
    assert fields["general.architecture"] == "llama"
    assert (fields["llama.context_length"], fields["llama.block_count"]) == (4096, 3)
    assert {"llama.embedding_length", "llama.attention.head_count", "llama.attention.head_count_kv"} <= set(fields)
    total = sum(int(t.n_elements) for t in reader.tensors)
    assert total >= 1000
    assert api.model_info("acme/gguf").gguf == {"total": total, "architecture": "llama", "context_length": 4096}
    assert all(np.array_equal(loaded[name], array) for name, array in tensors.items())
    assert api.model_info("acme/st").safetensors.parameters == {"F32": 12, "F16": 5}


def test_a_failure_asked_for_answers_the_next_matching_request_only(hub: Hub, api: HfApi):
    hub.repo("acme/down", files={"config.json": b"{}"})
    hub.fail_next("/api/models/acme/down*", 503)

    with pytest.raises(HfHubHTTPError) as failed:
        api.model_info("acme/down")

    assert failed.value.response.status_code == 503
    assert api.model_info("acme/down").id == "acme/down"
    assert [h.status for h in hub.hits] == [503, 200]


def test_the_stand_in_runs_as_a_process_from_a_spec(tmp_path: Path):
    spec = {"tokens": ["hf_spec"],
            "repos": {"acme/spec": {"files": {"config.json": '{"v": 1}', "data.bin": {"random": 4096, "seed": 3},
                                              "model.gguf": {"gguf": {"context_length": 512}}},
                                    "gated": "auto",
                                    "commits": [{"message": "v2", "files": {"config.json": '{"v": 2}'}}]}}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    process = HubProcess(tmp_path / "spec.json").start()
    try:
        api = HfApi(endpoint=process.url, token="hf_spec")
        info = api.model_info("acme/spec")
        data, config = (Path(hf_hub_download("acme/spec", name, cache_dir=tmp_path / "cache", endpoint=process.url,
                                             token="hf_spec")) for name in ("data.bin", "config.json"))
    finally:
        process.stop()

    assert (info.gated, info.gguf["context_length"]) == ("auto", 512)
    assert data.read_bytes() == big_file(4096, seed=3)
    assert config.read_text() == '{"v": 2}'  # main is the spec's last commit
