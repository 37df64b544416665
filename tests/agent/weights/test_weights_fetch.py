"""Fetching one file: once per node, carried on after a cut or a restart, told as progress."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

import pytest

from llmgw.agent.weights import Attempts, FetchFailed, Weights

BODY = os.urandom(3_000_000)
SUM = hashlib.sha256(BODY).hexdigest()


async def test_a_download_cut_half_way_carries_on_from_where_it_stopped(weights, origin):
    origin.files["/models/qwen.gguf"] = BODY
    origin.cut["/models/qwen.gguf"] = 1_500_000

    path = await weights.fetch(origin.url + "/models/qwen.gguf", sha256=SUM)

    assert Path(path).read_bytes() == BODY
    first, second = origin.gets("/models/qwen.gguf")
    assert first.range is None
    assert second.range == "bytes=1500000-"
    assert second.if_range == origin.etag(BODY)
    # Nothing of the cache's bookkeeping is left but the kept sum.
    assert sorted(p.name for p in Path(path).parent.iterdir()) == [".qwen.gguf.sha256", "qwen.gguf"]


async def test_an_agent_restarted_carries_on_from_the_part_the_last_one_left(cache_dir, origin):
    origin.files["/models/qwen.gguf"] = BODY
    origin.stall["/models/qwen.gguf"] = 1_000_000
    source = origin.url + "/models/qwen.gguf"
    seen = []
    reached = asyncio.Event()

    def progress(p):
        seen.append(p)
        if p.bytes_done >= 1_000_000:
            reached.set()

    first = Weights(cache_dir, progress_interval=0)
    fetching = asyncio.create_task(first.fetch(source, sha256=SUM, on_progress=progress))
    await asyncio.wait_for(reached.wait(), 10)
    # The agent stops (the shard stopped, the agent restarted): the part stays.
    fetching.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetching
    await first.close()
    assert not Path(first.cached_path(source)).exists()

    again = Weights(cache_dir, progress_interval=0)
    try:
        path = await again.fetch(source, sha256=SUM)
    finally:
        await again.close()

    assert Path(path).read_bytes() == BODY
    assert origin.gets()[-1].range == "bytes=1000000-"
    assert seen[-1].bytes_total == len(BODY)


async def test_a_server_answering_a_range_with_the_whole_file_is_started_again(weights, origin):
    origin.files["/m.gguf"] = BODY
    origin.cut["/m.gguf"] = 700_000
    origin.ranges = False

    path = await weights.fetch(origin.url + "/m.gguf", sha256=SUM)

    # Appending the whole file to the part would have made a 3.7 MB model.
    assert Path(path).read_bytes() == BODY
    assert origin.gets()[1].range == "bytes=700000-"


async def test_a_part_from_a_file_since_changed_at_its_source_is_not_carried_on(weights, origin):
    source = origin.url + "/m.gguf"
    target = Path(weights.cached_path(source))
    target.parent.mkdir(parents=True)
    # Left by an earlier try, of the file as it was then.
    (target.parent / ".m.gguf.part").write_bytes(b"x" * 500_000)
    (target.parent / ".m.gguf.part.json").write_text(json.dumps({"etag": '"old"', "total": 900_000}))
    origin.files["/m.gguf"] = BODY

    path = await weights.fetch(source, sha256=SUM)

    assert Path(path).read_bytes() == BODY
    assert origin.gets()[0].if_range == '"old"'


async def test_two_shards_asking_for_one_source_at_once_make_one_download(weights, origin):
    origin.files["/m.gguf"] = BODY
    a, b = [], []

    paths = await asyncio.gather(
        weights.fetch(origin.url + "/m.gguf", sha256=SUM, on_progress=a.append),
        weights.fetch(origin.url + "/m.gguf", sha256=SUM, on_progress=b.append),
    )

    assert paths[0] == paths[1]
    assert len(origin.gets()) == 1
    assert a and b
    assert a[-1].bytes_done == b[-1].bytes_done == len(BODY)


async def test_a_file_fetched_once_is_served_from_the_cache_unread(weights, origin, monkeypatch):
    origin.files["/m.gguf"] = BODY
    await weights.fetch(origin.url + "/m.gguf", sha256=SUM)
    hashed = []
    from llmgw.hub import checksum
    real = checksum.sha256_file
    monkeypatch.setattr(checksum, "sha256_file", lambda *a: hashed.append(a[0]) or real(*a))
    seen = []

    path = await weights.fetch(origin.url + "/m.gguf", sha256=SUM, on_progress=seen.append)

    assert Path(path).read_bytes() == BODY
    assert len(origin.gets()) == 1
    assert hashed == []  # the sum kept beside it was read instead


async def test_progress_says_the_bytes_then_checking_and_no_more_often_than_asked(cache_dir, origin):
    origin.files["/m.gguf"] = BODY
    seen = []
    w = Weights(cache_dir, progress_interval=60)
    try:
        await w.fetch(origin.url + "/m.gguf", sha256=SUM, on_progress=seen.append)
    finally:
        await w.close()

    fetching = [p for p in seen if p.phase == ""]
    checking = [p for p in seen if p.phase == "checking"]
    # The first and the last of each phase; nothing in between at 60 s.
    assert [(p.bytes_done, p.bytes_total) for p in fetching] == [(0, len(BODY)), (len(BODY), len(BODY))]
    assert checking[-1].bytes_done == checking[-1].bytes_total == len(BODY)
    assert len(checking) == 2
    assert all(p.source == origin.url + "/m.gguf" for p in seen)


async def test_a_file_the_server_does_not_have_says_so_with_the_status(weights, origin):
    with pytest.raises(FetchFailed) as refused:
        await weights.fetch(origin.url + "/nope.gguf")

    assert refused.value.status == 404
    assert str(refused.value) == (
        f"{origin.url}/nope.gguf answered 404 Not Found: check the model's source: the server has no file there")
    assert len(origin.gets()) == 1


async def test_a_server_that_keeps_cutting_gives_up_keeping_what_arrived(cache_dir, origin):
    origin.files["/m.gguf"] = BODY
    w = Weights(cache_dir, progress_interval=0, attempts=Attempts(tries=2, delays=(0.0,)))
    origin.status["/m.gguf"] = 503
    try:
        with pytest.raises(FetchFailed) as refused:
            await w.fetch(origin.url + "/m.gguf")
    finally:
        await w.close()

    assert "2 tries in a row brought nothing more" in str(refused.value)
    assert "503" in str(refused.value)
    assert len(origin.gets()) == 2


async def test_a_signed_urls_query_stays_out_of_errors(weights, origin):
    with pytest.raises(FetchFailed) as refused:
        await weights.fetch(origin.url + "/nope.gguf?X-Amz-Signature=secret")

    assert "secret" not in str(refused.value)
