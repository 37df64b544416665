"""Knowledge bases as OpenAI's API writes them (openai.types.VectorStore, VectorStoreFile, search results)."""

from __future__ import annotations

from typing import Any

from llmgw.kb import Hit
from llmgw.store import KbCounts, KbFile, VectorStore


def chunking_object(tokens: int, overlap: int) -> dict[str, Any]:
    return {"type": "static", "static": {"max_chunk_size_tokens": tokens, "chunk_overlap_tokens": overlap}}


def vector_store_object(vs: VectorStore, counts: KbCounts | None) -> dict[str, Any]:
    counts = counts or KbCounts()
    return {
        "id": vs.id, "object": "vector_store", "created_at": int(vs.created_at), "name": vs.name,
        "usage_bytes": counts.usage_bytes,
        "file_counts": {"in_progress": counts.in_progress, "completed": counts.completed, "failed": counts.failed,
                        "cancelled": counts.cancelled, "total": counts.total},
        "status": "in_progress" if counts.in_progress else "completed",
        "expires_after": None, "expires_at": None, "last_active_at": int(vs.last_active_at),
        "metadata": vs.metadata,
        # Not in OpenAI's object (it has one model): which of the catalog's models embeds this base.
        "embedding_model": vs.embedding_model,
    }


def file_object(file: KbFile) -> dict[str, Any]:
    return {
        "id": file.file_id, "object": "vector_store.file", "created_at": int(file.created_at),
        "vector_store_id": file.vector_store_id, "status": file.status, "last_error": file.last_error,
        "usage_bytes": file.bytes if file.status == "completed" else 0,
        "chunking_strategy": chunking_object(file.chunk_tokens, file.chunk_overlap),
        "attributes": file.attributes or None,
        # Not in OpenAI's object: the passages the guardrails refused to send to the embedding model, left out.
        "skipped_passages": file.skipped,
    }


def hit_object(hit: Hit) -> dict[str, Any]:
    p = hit.passage
    return {"file_id": p.file_id, "filename": p.filename, "score": round(hit.score, 6),
            "attributes": p.attributes or None, "content": [{"type": "text", "text": p.text}]}


def cursor_page(data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}
