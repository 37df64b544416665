"""The two reads of Hugging Face's API a control plane pins a model with, answered from what the mirror holds.

    GET /api/models/ORG/REPO/revision/REVISION      {"id", "sha", "author", ...}: REVISION is a commit held, or
                                                    a branch or tag name, which is the commit last brought in
    GET /api/models/ORG/REPO/tree/COMMIT            every held file at the commit: size, the sha256 (as lfs.oid),
                                                    Hugging Face's scan (securityFileStatus)

For a site with no way to Hugging Face: files carried in on a disk (`llmgw mirror import`) are pinned, and a
model is added from them, with the cluster's hub.endpoint set to the mirror (docs/mirror.md, "Air-gapped
sites"). The answers have the shapes llmgw's own hub client (llmgw.hub.client) and huggingface_hub read, and its
error codes (X-Error-Code) for a repository or revision not held.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from llmgw.mirror.holdings import Held
from llmgw.mirror.service import Mirror

_NOT_HELD = "RepoNotFound"
_NO_REVISION = "RevisionNotFound"


def _refuse(code: str, message: str) -> web.Response:
    return web.Response(status=404, body=orjson.dumps({"error": message}), content_type="application/json",
                        headers={"X-Error-Code": code})


def _held(mirror: Mirror, repo_id: str) -> list[Held]:
    return [h for h in mirror.holdings.held.values() if h.repo == repo_id]


def _commit(files: list[Held], revision: str) -> str | None:
    """A commit held, named in full or by a prefix of 7 or more; any other name is the commit brought in last."""
    commits = {h.commit for h in files}
    if revision in commits:
        return revision
    if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
        found = [c for c in commits if c.startswith(revision)]
        return found[0] if len(found) == 1 else None
    return max(files, key=lambda h: h.added_at).commit if files else None


async def revision(request: web.Request, mirror: Mirror) -> web.Response:
    info = request.match_info
    repo_id = f"{info['org']}/{info['repo']}"
    files = _held(mirror, repo_id)
    if not files:
        return _refuse(_NOT_HELD, f"the mirror holds nothing of {repo_id}")
    commit = _commit(files, info["revision"])
    if commit is None:
        return _refuse(_NO_REVISION, f"the mirror holds no commit {info['revision']} of {repo_id}")
    return web.Response(body=orjson.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "author": info["org"],
                                           "private": False, "gated": False,
                                           "siblings": [{"rfilename": h.path} for h in files if h.commit == commit]}),
                        content_type="application/json")


async def tree(request: web.Request, mirror: Mirror) -> web.Response:
    info = request.match_info
    repo_id = f"{info['org']}/{info['repo']}"
    files = _held(mirror, repo_id)
    if not files:
        return _refuse(_NOT_HELD, f"the mirror holds nothing of {repo_id}")
    commit = info["commit"]
    if commit not in {h.commit for h in files}:
        return _refuse(_NO_REVISION, f"the mirror holds no commit {commit} of {repo_id}")
    entries = [{"type": "file", "path": h.path, "size": h.size, "oid": h.sha256,
                "lfs": {"oid": h.sha256, "size": h.size, "pointerSize": 0},
                "securityFileStatus": {"status": h.scan or "unscanned"}}
               for h in sorted(files, key=lambda h: h.path) if h.commit == commit]
    return web.Response(body=orjson.dumps(entries), content_type="application/json")
