"""Hugging Face as llmgw reads it: `hf:` sources, and a hub's API for what a repository holds at a commit.

    from llmgw.hub import Hub, parse_source

    hf = parse_source("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    info = await Hub("https://huggingface.co").repo(hf.repo_id, hf.revision)
    info.commit, info.files[hf.path].sha256, info.files[hf.path].scan

Below both the control plane, which pins what is added to the catalog (docs/models.md, "Pinned"), and the
agent, which fetches what it is given; it imports only llmgw.errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmgw.lazyface import lazy_face

if TYPE_CHECKING:
    from llmgw.hub.client import Found, Hub, HubError, HubFile, RepoInfo
    from llmgw.hub.source import HfSource, SourceError, is_commit, parse_source
    from llmgw.hub.token import TokenFileError, bearer

__all__ = ["Found", "HfSource", "Hub", "HubError", "HubFile", "RepoInfo", "SourceError", "TokenFileError", "bearer",
           "is_commit", "parse_source"]

__getattr__ = lazy_face(__name__, {
    "client": ["Found", "Hub", "HubError", "HubFile", "RepoInfo"],
    "source": ["HfSource", "SourceError", "is_commit", "parse_source"],
    "token": ["TokenFileError", "bearer"],
})
