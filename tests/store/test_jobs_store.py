"""Workflow jobs in the store: a run read back whole, moved only by compare-and-set, kept until retention."""

from __future__ import annotations

import pytest

from llmgw.store import ENDED_JOB, OPEN_JOB, Job, StoreError


def _job(job_id: str = "run_" + "a" * 24, *, project: str = "prj_a", model: str = "sdxl", status: str = "queued",
         at: float = 10.0) -> Job:
    return Job(job_id, project, "key_1", "per_1", model, status,
               {"prompt": "a lighthouse at dusk", "seed": 7, "image": "file-in"}, at,
               metadata={"batch": "nightly"})


async def test_a_job_added_is_read_back_whole_with_its_json_fields_and_no_error(store):
    await store.add_job(_job())

    job = await store.job_by_id("run_" + "a" * 24)
    assert job == _job()
    assert job.inputs == {"prompt": "a lighthouse at dusk", "seed": 7, "image": "file-in"}
    assert (job.progress, job.outputs, job.error, job.replica, job.request_id) == ({}, [], None, "", "")
    assert await store.job_by_id("run_" + "f" * 24) is None


async def test_a_finished_job_reads_back_with_its_outputs_progress_and_error(store):
    await store.add_job(Job("run_1", "prj_a", None, None, "sdxl", "failed", {}, 5.0, request_id="req_1",
                            started_at=6.0, ended_at=9.5,
                            progress={"value": 3, "max": 20, "node": "KSampler", "done_nodes": 4,
                                      "total_nodes": 9},
                            outputs=[{"file_id": "file-o", "filename": "a.png", "kind": "image", "bytes": 1234}],
                            error={"code": "node_failed", "message": "KSampler ran out of memory"},
                            replica="node1/sdxl-0"))

    job = await store.job_by_id("run_1")
    assert (job.key_id, job.person_id, job.started_at, job.ended_at) == (None, None, 6.0, 9.5)
    assert job.progress["node"] == "KSampler"
    assert job.outputs == [{"file_id": "file-o", "filename": "a.png", "kind": "image", "bytes": 1234}]
    assert job.error == {"code": "node_failed", "message": "KSampler ran out of memory"}
    assert (job.replica, job.request_id) == ("node1/sdxl-0", "req_1")


async def test_a_project_lists_its_jobs_newest_first_paged_by_after_and_of_one_model_when_asked(store):
    await store.add_job(_job("run_1", at=1.0))
    await store.add_job(_job("run_2", at=2.0, model="flux"))
    await store.add_job(_job("run_3", at=3.0))
    await store.add_job(_job("run_4", at=3.0))  # made in the same instant: the id breaks the tie
    await store.add_job(_job("run_5", at=5.0, project="prj_b"))

    assert [j.id for j in await store.list_jobs("prj_a")] == ["run_4", "run_3", "run_2", "run_1"]
    first = await store.list_jobs("prj_a", limit=2)
    assert [j.id for j in first] == ["run_4", "run_3"]
    assert [j.id for j in await store.list_jobs("prj_a", limit=2, after=first[-1].id)] == ["run_2", "run_1"]
    assert [j.id for j in await store.list_jobs("prj_a", model="sdxl")] == ["run_4", "run_3", "run_1"]
    assert [j.id for j in await store.list_jobs("prj_a", model="sdxl", after="run_3")] == ["run_1"]
    assert [j.id for j in await store.list_jobs("prj_b")] == ["run_5"]


async def test_the_runner_sees_only_queued_and_running_jobs_oldest_first(store):
    await store.add_job(_job("run_new", at=3.0))
    await store.add_job(_job("run_mid", at=2.0, status="running"))
    await store.add_job(_job("run_old", at=1.0))
    for n, status in enumerate(ENDED_JOB):
        await store.add_job(_job(f"run_ended_{n}", at=0.5, status=status))

    assert [j.id for j in await store.open_jobs()] == ["run_old", "run_mid", "run_new"]
    assert {j.status for j in await store.open_jobs()} <= set(OPEN_JOB)


async def test_a_job_moves_only_from_the_statuses_named_with_its_changes_written(store):
    await store.add_job(_job("run_1"))

    assert await store.move_job("run_1", ["queued"], "running",
                                {"started_at": 11.0, "replica": "node1/sdxl-0", "request_id": "req_9"}) is True
    assert await store.move_job("run_1", ["queued"], "running") is False  # moved already
    outputs = [{"file_id": "file-o", "filename": "out.png", "kind": "image", "bytes": 99}]
    assert await store.move_job("run_1", ["running"], "succeeded", {"ended_at": 20.0, "outputs": outputs}) is True

    job = await store.job_by_id("run_1")
    assert (job.status, job.started_at, job.ended_at) == ("succeeded", 11.0, 20.0)
    assert (job.replica, job.request_id, job.outputs) == ("node1/sdxl-0", "req_9", outputs)
    assert await store.move_job("run_unknown", ["queued"], "running") is False


async def test_a_cancelled_job_is_not_moved_to_succeeded_by_the_runner_finishing_after(store):
    await store.add_job(_job("run_1", status="running"))

    assert await store.move_job("run_1", ["queued", "running"], "cancelled", {"ended_at": 12.0}) is True
    finished = {"ended_at": 13.0, "outputs": [{"file_id": "file-late", "filename": "x.png", "kind": "image",
                                                "bytes": 1}]}
    assert await store.move_job("run_1", ["running"], "succeeded", finished) is False

    job = await store.job_by_id("run_1")
    assert (job.status, job.ended_at, job.outputs) == ("cancelled", 12.0, [])


async def test_a_failed_job_keeps_its_error_and_an_error_can_be_cleared_to_none(store):
    await store.add_job(_job("run_1", status="running"))

    error = {"code": "timeout", "message": "the workflow ran past 600 s"}
    assert await store.move_job("run_1", ["running"], "failed", {"error": error, "ended_at": 30.0}) is True
    assert (await store.job_by_id("run_1")).error == error
    assert await store.move_job("run_1", ["failed"], "queued", {"error": None, "ended_at": None}) is True
    job = await store.job_by_id("run_1")
    assert (job.status, job.error, job.ended_at) == ("queued", None, None)


async def test_a_change_to_a_column_a_status_change_may_not_set_is_refused_naming_it(store):
    await store.add_job(_job("run_1"))

    with pytest.raises(StoreError, match="model, project_id"):
        await store.move_job("run_1", ["queued"], "running", {"project_id": "prj_b", "model": "flux"})
    assert (await store.job_by_id("run_1")).status == "queued"


async def test_progress_is_written_while_running_and_not_to_a_queued_or_ended_job(store):
    await store.add_job(_job("run_q"))
    await store.add_job(_job("run_r", status="running"))
    await store.add_job(_job("run_e", status="succeeded"))
    step = {"value": 5, "max": 20, "node": "KSampler", "done_nodes": 3, "total_nodes": 9}

    for job_id in ("run_q", "run_r", "run_e", "run_unknown"):
        await store.set_job_progress(job_id, step)

    assert (await store.job_by_id("run_r")).progress == step
    assert (await store.job_by_id("run_q")).progress == {}
    assert (await store.job_by_id("run_e")).progress == {}


async def test_retention_finds_only_ended_jobs_made_before_its_time_oldest_first_and_deletes_them(store):
    await store.add_job(_job("run_failed", at=2.0, status="failed"))
    await store.add_job(_job("run_done", at=1.0, status="succeeded"))
    await store.add_job(_job("run_cancelled", at=3.0, status="cancelled"))
    await store.add_job(_job("run_running", at=1.5, status="running"))
    await store.add_job(_job("run_queued", at=1.5))
    await store.add_job(_job("run_recent", at=50.0, status="succeeded"))

    old = await store.old_jobs(before=10.0)
    assert [j.id for j in old] == ["run_done", "run_failed", "run_cancelled"]
    assert [j.id for j in await store.old_jobs(before=10.0, limit=1)] == ["run_done"]

    assert await store.delete_job("run_done") is True
    assert await store.delete_job("run_done") is False
    assert await store.job_by_id("run_done") is None
    assert [j.id for j in await store.old_jobs(before=10.0)] == ["run_failed", "run_cancelled"]
