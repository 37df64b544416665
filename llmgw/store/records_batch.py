"""The records of files and batches (issue 16): what the store keeps of them, never a path a user gave."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmgw.store.records import Usage

# Where a file's bytes are: in its row, or on the leader's data directory under files/<id>.
IN_STORE = "store"
ON_DISK = "disk"

# A batch's statuses, as OpenAI names them. Open ones are the runner's to carry on.
OPEN_BATCH = ("validating", "in_progress", "finalizing", "cancelling")
ENDED_BATCH = ("completed", "failed", "expired", "cancelled")


@dataclass(frozen=True)
class StoredFile:
    id: str  # file-…
    project_id: str
    key_id: str | None  # the key that uploaded it; None for a file a batch wrote
    purpose: str  # batch, batch_output
    filename: str  # as the uploader named it: shown, never a path
    bytes: int
    created_at: float
    place: str  # IN_STORE or ON_DISK


@dataclass
class Batch:
    id: str  # batch_…
    project_id: str
    key_id: str
    endpoint: str  # /v1/chat/completions or /v1/embeddings
    input_file_id: str
    completion_window: str
    status: str
    total: int
    created_at: float
    expires_at: float
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: float | None = None
    finalizing_at: float | None = None
    completed_at: float | None = None
    cancelling_at: float | None = None
    cancelled_at: float | None = None
    failed_at: float | None = None
    expired_at: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)  # OpenAI's batch errors: code, message, line


# A batch's columns a status change may set, besides the status (move_batch).
BATCH_STAMPS = ("in_progress_at", "finalizing_at", "completed_at", "cancelling_at", "cancelled_at", "failed_at",
                "expired_at", "output_file_id", "error_file_id", "errors")


@dataclass(frozen=True)
class BatchLine:
    line: int  # its line number in the input file, from 1
    custom_id: str
    state: str  # pending, done or error
    result: dict[str, Any] | None = None  # the output (or error) file's line, once recorded


@dataclass(frozen=True)
class LineResult:
    """One line's outcome, recorded with its usage row in one transaction (finish_lines)."""

    line: int
    state: str  # done or error
    result: dict[str, Any]
    usage: Usage | None = None
