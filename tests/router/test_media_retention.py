"""Pictures and runs' files are kept for router.jobs.retain_days, whatever router.batch.retain_days says, and a
file an open run was given stays until the run ends. Against the real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from llmgw.config import ClusterSettings
from llmgw.router.batches.runner import BatchRunner
from llmgw.router.media.jobrunner import JobRunner
from llmgw.store import Job, StoredFile

DAY = 86400.0
NOW = 100 * DAY


def _file(file_id: str, purpose: str, age_days: float) -> StoredFile:
    return StoredFile(file_id, "prj_a", "key_1", purpose, f"{file_id}.png", 4, NOW - age_days * DAY, "store")


def _plane(store, tmp_path, batch_days: int, job_days: int):
    settings = ClusterSettings()
    router = dataclasses.replace(settings.router, batch=dataclasses.replace(settings.router.batch,
                                                                            retain_days=batch_days),
                                 jobs=dataclasses.replace(settings.router.jobs, retain_days=job_days))
    current = dataclasses.replace(settings, router=router)
    # What the runners read of the control plane: its store, data directory and settings in force.
    return SimpleNamespace(store=store, cfg=SimpleNamespace(data_dir=str(tmp_path)),
                           settings=SimpleNamespace(current=current))


async def _ids(store) -> set[str]:
    return {f.id for f in await store.list_files("prj_a", limit=100)}


async def test_each_runner_deletes_its_own_files_after_its_own_days(store, tmp_path):
    for file_id, purpose, age in (("file-batch-old", "batch", 10), ("file-picture-old", "image_generation", 10),
                                  ("file-output-old", "workflow_output", 40), ("file-picture-new", "image_generation",
                                                                               1)):
        await store.add_file(_file(file_id, purpose, age), b"\x89PNG")
    plane = _plane(store, tmp_path, batch_days=7, job_days=30)

    await BatchRunner(plane, leading=lambda: True).sweep(NOW)
    # The batch's file was past router.batch.retain_days; the picture of the same age is the jobs' to keep.
    assert await _ids(store) == {"file-picture-old", "file-output-old", "file-picture-new"}

    assert await JobRunner(plane, leading=lambda: True).sweep(NOW) == (0, 1)
    assert await _ids(store) == {"file-picture-old", "file-picture-new"}


async def test_a_file_an_open_run_was_given_stays_until_the_run_ends(store, tmp_path):
    await store.add_file(_file("file-given", "workflow_input", 40), b"\x89PNG")
    await store.add_file(_file("file-spare", "workflow_input", 40), b"\x89PNG")
    await store.add_job(Job(id="run_" + "a" * 24, project_id="prj_a", key_id="key_1", person_id=None, model="pic",
                            status="queued", inputs={"image": "file-given", "prompt": "x"}, created_at=NOW))
    runner = JobRunner(_plane(store, tmp_path, batch_days=7, job_days=30), leading=lambda: True)

    assert await runner.sweep(NOW) == (0, 1)
    assert await _ids(store) == {"file-given"}
