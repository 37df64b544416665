"""The records of workflow jobs: a ComfyUI workflow run by POST /v1/workflows/runs, as the store keeps it.

A run takes minutes and outlives the request that asked for it, so it is a
row the leader's runner carries on (open_jobs) and the client polls, as a
batch is; its output files are files in the files table, named here by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A job's statuses. Open ones are the runner's to carry on; an ended one is
# kept until router.jobs.retain_days, then deleted with its output files.
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
OPEN_JOB = ("queued", "running")
ENDED_JOB = ("succeeded", "failed", "cancelled")


@dataclass
class Job:
    id: str  # run_ + 24 hex digits
    project_id: str
    key_id: str | None
    person_id: str | None
    model: str
    status: str  # one of JOB_STATUSES
    inputs: dict[str, Any]  # the run's values as the client gave them (file inputs as file-… ids)
    created_at: float
    request_id: str = ""  # its usage row's id (req_…)
    started_at: float | None = None
    ended_at: float | None = None
    progress: dict[str, Any] = field(default_factory=dict)  # value, max, node, done_nodes, total_nodes
    outputs: list[dict[str, Any]] = field(default_factory=list)  # each: file_id, filename, kind, bytes
    error: dict[str, Any] | None = None  # code, message
    replica: str = ""  # the endpoint it ran on ("" until it starts)
    metadata: dict[str, str] = field(default_factory=dict)  # the client's, as OpenAI's metadata


# A job's columns a status change may set, besides the status (move_job).
JOB_CHANGES = ("started_at", "ended_at", "progress", "outputs", "error", "replica", "request_id")
