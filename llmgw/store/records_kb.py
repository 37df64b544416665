"""The records of knowledge bases (issue 29): OpenAI's vector stores, their files and passages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A file whose passages were cut on the machine that holds the document (`llmgw-kb`): its name is the
# document's path with this after it, and it is shown by the document's path alone.
PASSAGES_SUFFIX = ".passages.jsonl"


def shown_name(filename: str) -> str:
    return filename[:-len(PASSAGES_SUFFIX)] if filename.endswith(PASSAGES_SUFFIX) else filename


# A file's statuses in a knowledge base, as OpenAI names them.
KB_FILE_IN_PROGRESS = "in_progress"
KB_FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


# Who a knowledge base belongs to, and who else it is given to: the places of the tree (and one key).
KB_OWNER_SCOPES = ("project", "team", "org")
KB_GRANT_SCOPES = ("project", "team", "org", "key")
KB_ACCESS = ("read", "write")  # a grant's: search and answer from it; and add and remove its files


@dataclass(frozen=True)
class VectorStore:
    id: str  # vs_…
    owner_id: str  # the id of the project (or team, or org: owner_scope) whose keys it is
    key_id: str | None  # the key that made it
    name: str
    embedding_model: str
    chunk_tokens: int  # the passages' length, in tokens, for files added without a chunking strategy
    chunk_overlap: int
    created_at: float
    last_active_at: float
    metadata: dict[str, str] = field(default_factory=dict)
    owner_scope: str = "project"  # one of KB_OWNER_SCOPES


@dataclass(frozen=True)
class KbGrant:
    vector_store_id: str
    scope: str  # one of KB_GRANT_SCOPES
    scope_id: str
    access: str  # one of KB_ACCESS


@dataclass(frozen=True)
class KbFile:
    vector_store_id: str
    file_id: str
    key_id: str | None  # the key that added it: its imports are embedded as that key's requests
    status: str  # one of KB_FILE_STATUSES
    created_at: float
    bytes: int
    chunk_tokens: int
    chunk_overlap: int
    passages: int = 0
    last_error: dict[str, str] | None = None  # OpenAI's: code and message
    attributes: dict[str, Any] = field(default_factory=dict)
    # The passages the guardrails refused to send to the embedding model: {"passage", "code", "message"} each.
    skipped: list[dict[str, Any]] = field(default_factory=list)
    batch_id: str | None = None  # the file batch (vsfb_…) that added it


@dataclass(frozen=True)
class KbCounts:
    """A knowledge base's files by status, and the bytes of those read."""

    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    usage_bytes: int = 0

    @property
    def total(self) -> int:
        return self.in_progress + self.completed + self.failed + self.cancelled


@dataclass(frozen=True)
class NewPassage:
    ordinal: int  # its place in the file, from 0
    text: str
    vector: bytes  # float32, little-endian


@dataclass(frozen=True)
class Passage:
    id: int
    vector_store_id: str
    file_id: str
    filename: str
    ordinal: int
    text: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KbChange:
    seq: int
    vector_store_id: str
    file_id: str | None
    op: str  # KB_ADD, KB_REMOVE or KB_DROP


KB_ADD = "add"  # a file's passages were added
KB_REMOVE = "remove"  # a file's passages were removed
KB_DROP = "drop"  # a whole knowledge base was deleted
