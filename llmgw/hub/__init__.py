"""Hugging Face as llmgw reads it: `hf:` sources, and a hub's API for what a repository holds at a commit.

    from llmgw.hub import Hub, parse_source

    hf = parse_source("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    info = await Hub("https://huggingface.co").repo(hf.repo_id, hf.revision)
    info.commit, info.files[hf.path].sha256, info.files[hf.path].scan

Below the control plane, which pins what is added to the catalog (docs/models.md, "Pinned"), and the agent and
the model mirror, which fetch files (`download_part`, resumed with Range) and check them (`sha256_file`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.hub.checksum import Counter, keep, kept_path, read_kept, sha256_file, sha256_many
    from llmgw.hub.client import Found, Hub, HubError, HubFile, RepoInfo
    from llmgw.hub.download import (
        MIRROR_DONE,
        MIRROR_PHASE,
        MIRROR_TOTAL,
        Attempts,
        check_room,
        discard,
        download_part,
        finish,
        meta_path,
        part_path,
        size_of,
    )
    from llmgw.hub.source import HfSource, SourceError, is_commit, parse_source
    from llmgw.hub.token import TokenFileError, bearer
    from llmgw.hub.transfererrors import ChecksumMismatch, FetchFailed, WeightsError, redact

__all__ = ["MIRROR_DONE", "MIRROR_PHASE", "MIRROR_TOTAL", "Attempts", "ChecksumMismatch", "Counter", "FetchFailed",
           "Found", "HfSource", "Hub", "HubError", "HubFile", "RepoInfo", "SourceError", "TokenFileError",
           "WeightsError", "bearer", "check_room", "discard", "download_part", "finish", "is_commit", "keep",
           "kept_path", "meta_path", "parse_source", "part_path", "read_kept", "redact", "sha256_file", "sha256_many",
           "size_of"]

__getattr__ = lazy_face(__name__, {
    "checksum": ["Counter", "keep", "kept_path", "read_kept", "sha256_file", "sha256_many"],
    "client": ["Found", "Hub", "HubError", "HubFile", "RepoInfo"],
    "download": ["MIRROR_DONE", "MIRROR_PHASE", "MIRROR_TOTAL", "Attempts", "check_room", "discard", "download_part",
                 "finish", "meta_path", "part_path", "size_of"],
    "source": ["HfSource", "SourceError", "is_commit", "parse_source"],
    "token": ["TokenFileError", "bearer"],
    "transfererrors": ["ChecksumMismatch", "FetchFailed", "WeightsError", "redact"],
})
