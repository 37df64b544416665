"""Files and batches in the store: a project's files, a batch's lines each recorded once with its usage row."""

from __future__ import annotations

from llmgw.store import Batch, LineResult, StoredFile, Usage


def _file(file_id: str, project: str = "prj_a", at: float = 1.0, size: int = 10) -> StoredFile:
    return StoredFile(file_id, project, "key_1", "batch", f"{file_id}.jsonl", size, at, "store")


def _batch(batch_id: str = "batch_1", total: int = 3, project: str = "prj_a", at: float = 10.0) -> Batch:
    return Batch(batch_id, project, "key_1", "/v1/chat/completions", "file-in", "24h", "in_progress", total,
                 created_at=at, expires_at=at + 86400, in_progress_at=at, metadata={"job": "nightly"})


def _usage(request_id: str, batch_id: str = "batch_1", cost: int = 5) -> Usage:
    return Usage(request_id, 100.0, "key_1", "prj_a", "m", status=200, prompt_tokens=3, completion_tokens=2,
                 cost_micros=cost, batch_id=batch_id, detail={"batch": batch_id})


async def test_a_file_reads_back_with_its_bytes_and_a_project_sees_only_its_own_newest_first(store):
    await store.add_file(_file("file-1", at=1.0), b'{"a": 1}\n')
    await store.add_file(_file("file-2", at=2.0, size=30), b"x" * 30)
    await store.add_file(_file("file-3", project="prj_b", at=3.0), b"other")

    assert await store.file_by_id("file-1") == _file("file-1", at=1.0)
    assert await store.file_content("file-1") == b'{"a": 1}\n'
    assert [f.id for f in await store.list_files("prj_a")] == ["file-2", "file-1"]
    assert [f.id for f in await store.list_files("prj_a", after="file-2")] == ["file-1"]
    assert [f.id for f in await store.list_files("prj_a", purpose="batch_output")] == []
    assert await store.project_file_bytes("prj_a") == 40
    assert await store.delete_file("file-2") is True
    assert await store.delete_file("file-2") is False
    assert await store.file_by_id("file-2") is None
    assert await store.project_file_bytes("prj_a") == 10


async def test_a_file_kept_on_disk_has_no_bytes_in_the_store(store):
    await store.add_file(StoredFile("file-big", "prj_a", "key_1", "batch", "big.jsonl", 10 ** 7, 1.0, "disk"), None)

    assert (await store.file_by_id("file-big")).place == "disk"
    assert await store.file_content("file-big") is None


async def test_a_batch_reads_back_with_its_lines_pending_in_order(store):
    await store.add_batch(_batch(total=3), ["a", "b", "c"])

    batch = await store.batch_by_id("batch_1")
    assert batch == _batch(total=3)
    assert await store.pending_lines("batch_1") == [1, 2, 3]
    assert [(line.line, line.custom_id, line.state) for line in await store.batch_lines("batch_1")] == [
        (1, "a", "pending"), (2, "b", "pending"), (3, "c", "pending")]
    assert [b.id for b in await store.open_batches()] == ["batch_1"]
    assert await store.file_in_open_batch("file-in") == "batch_1"
    assert await store.file_in_open_batch("file-other") is None


async def test_a_line_is_recorded_once_with_its_usage_row_however_often_it_is_finished(store):
    await store.add_batch(_batch(total=3), ["a", "b", "c"])
    first = [LineResult(1, "done", {"custom_id": "a"}, _usage("req_1")),
             LineResult(2, "error", {"custom_id": "b"}, _usage("req_2"))]

    assert await store.finish_lines("batch_1", first) == (1, 1)
    # A second leader that sent line 1 again before it saw the first's record: neither its outcome nor its row counts.
    again = [LineResult(1, "done", {"custom_id": "a", "again": True}, _usage("req_1b")),
             LineResult(3, "done", {"custom_id": "c"}, _usage("req_3"))]
    assert await store.finish_lines("batch_1", again) == (1, 0)

    batch = await store.batch_by_id("batch_1")
    assert (batch.completed, batch.failed) == (2, 1)
    assert await store.pending_lines("batch_1") == []
    assert [line.result for line in await store.batch_lines("batch_1", "done")] == [
        {"custom_id": "a"}, {"custom_id": "c"}]
    rows = await store.usage_rows(0)
    assert sorted(u.id for u in rows) == ["req_1", "req_2", "req_3"]
    assert {u.batch_id for u in rows} == {"batch_1"}
    summary = await store.usage_summary(0, by="project", batch_only=True)
    assert [(g["requests"], g["cost_micros"]) for g in summary] == [(3, 15)]


async def test_usage_summed_for_batches_only_leaves_out_interactive_rows(store):
    await store.add_usage([Usage("req_i", 100.0, "key_1", "prj_a", "m", cost_micros=7), _usage("req_b")])

    assert [g["requests"] for g in await store.usage_summary(0, by="model")] == [2]
    assert [g["requests"] for g in await store.usage_summary(0, by="model", batch_only=True)] == [1]


async def test_a_batch_moves_only_from_the_statuses_named(store):
    await store.add_batch(_batch(total=1), ["a"])

    assert await store.move_batch("batch_1", ["in_progress"], "cancelling", {"cancelling_at": 20.0}) is True
    assert await store.move_batch("batch_1", ["in_progress"], "finalizing", {"finalizing_at": 21.0}) is False
    assert await store.move_batch("batch_1", ["cancelling"], "cancelled",
                                  {"cancelled_at": 22.0, "output_file_id": "file-out",
                                   "errors": [{"code": "x", "message": "y", "line": 1}]}) is True
    batch = await store.batch_by_id("batch_1")
    assert (batch.status, batch.cancelling_at, batch.cancelled_at, batch.finalizing_at) == (
        "cancelled", 20.0, 22.0, None)
    assert batch.output_file_id == "file-out"
    assert batch.errors == [{"code": "x", "message": "y", "line": 1}]
    assert await store.open_batches() == []


async def test_a_projects_batches_are_listed_newest_first(store):
    await store.add_batch(_batch("batch_1", total=1, at=1.0), ["a"])
    await store.add_batch(_batch("batch_2", total=1, at=2.0), ["a"])
    await store.add_batch(_batch("batch_3", total=1, project="prj_b", at=3.0), ["a"])

    assert [b.id for b in await store.list_batches("prj_a")] == ["batch_2", "batch_1"]
    assert [b.id for b in await store.list_batches("prj_a", after="batch_2")] == ["batch_1"]
    assert [b.id for b in await store.list_batches("prj_a", limit=1)] == ["batch_2"]


async def test_retention_finds_old_files_no_running_batch_uses_and_deletes_ended_batches_with_their_lines(store):
    for file_id, at in (("file-old", 1.0), ("file-in", 2.0), ("file-new", 50.0)):
        await store.add_file(_file(file_id, at=at), b"x")
    await store.add_batch(_batch("batch_running", total=1, at=3.0), ["a"])  # reads file-in
    await store.add_batch(_batch("batch_ended", total=2, at=4.0), ["a", "b"])
    await store.move_batch("batch_ended", ["in_progress"], "completed", {"completed_at": 5.0})
    await store.add_batch(_batch("batch_late", total=1, at=60.0), ["a"])
    await store.move_batch("batch_late", ["in_progress"], "failed", {"failed_at": 61.0})

    assert [f.id for f in await store.old_files(10.0)] == ["file-old"]
    assert await store.delete_ended_batches(10.0) == 1
    assert await store.batch_by_id("batch_ended") is None
    assert await store.batch_lines("batch_ended") == []
    assert {b.id for b in await store.list_batches("prj_a")} == {"batch_running", "batch_late"}
