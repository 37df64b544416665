"""Files and batches as OpenAI's API writes them (openai.types.FileObject, openai.types.Batch)."""

from __future__ import annotations

from typing import Any

from llmgw.store import Batch, StoredFile


def _seconds(at: float | None) -> int | None:
    return None if at is None else int(at)


def file_object(file: StoredFile) -> dict[str, Any]:
    return {"id": file.id, "object": "file", "bytes": file.bytes, "created_at": int(file.created_at),
            "filename": file.filename, "purpose": file.purpose, "status": "processed", "expires_at": None,
            "status_details": None}


def batch_object(batch: Batch) -> dict[str, Any]:
    errors = {"object": "list", "data": batch.errors} if batch.errors else None
    return {
        "id": batch.id, "object": "batch", "endpoint": batch.endpoint, "errors": errors,
        "input_file_id": batch.input_file_id, "completion_window": batch.completion_window,
        "status": batch.status, "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
        "created_at": int(batch.created_at), "in_progress_at": _seconds(batch.in_progress_at),
        "expires_at": _seconds(batch.expires_at), "finalizing_at": _seconds(batch.finalizing_at),
        "completed_at": _seconds(batch.completed_at), "failed_at": _seconds(batch.failed_at),
        "expired_at": _seconds(batch.expired_at), "cancelling_at": _seconds(batch.cancelling_at),
        "cancelled_at": _seconds(batch.cancelled_at),
        "request_counts": {"total": batch.total, "completed": batch.completed, "failed": batch.failed},
        "metadata": batch.metadata or None,
    }


def page(data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    """A list in OpenAI's cursor shape: the SDK pages on with `after` set to last_id."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}
