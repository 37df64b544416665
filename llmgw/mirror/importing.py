"""`llmgw mirror import DIR`: files carried in on a disk, for a site with no way to Hugging Face.

DIR is one of:

- a Hugging Face cache (what `huggingface-cli download` leaves in ~/.cache/huggingface/hub, or one
  `models--ORG--REPO` folder of it): each file under `snapshots/COMMIT/` is a link to `blobs/ID`, and the ID is
  what Hugging Face published for it, the sha256 of a file kept in LFS or the git blob id of a small one;
- a folder with a manifest.json: `{"files": [{"repo": "org/repo", "commit": "…40 hex…", "path": "model.gguf",
  "sha256": "…64 hex…", "file": "where/under/DIR"}]}` (`file` defaults to `path`).

Each file is read once, hashed as it is copied, and kept only when it is what it says it is: the pin the catalog
holds for it where the control planes asked for it, else its published ID. A file that differs is refused, naming
both sums, and nothing of it stays. Pickle formats are left out unless the catalog asks for them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw.engines import is_pickle
from llmgw.hub import discard
from llmgw.mirror.holdings import BadKey, FileKey, Held
from llmgw.mirror.service import Mirror, MirrorError

_REPO_DIR = re.compile(r"^models--([^/]+?)--(.+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 4 << 20


@dataclass(frozen=True)
class Carried:
    key: FileKey
    file: Path
    sha256: str = ""
    """Published for it (an LFS blob's name, the manifest's)."""
    git_oid: str = ""
    """A small file's git blob id, where that is all that was published."""


async def import_dir(mirror: Mirror, folder: str) -> dict[str, Any]:
    root = Path(folder)
    if not root.is_dir():
        raise MirrorError(f"{folder} is not a folder on the mirror's machine", 404)
    found, refused = await asyncio.to_thread(_survey, root)
    report: dict[str, list[Any]] = {"imported": [], "already": [], "refused": refused}
    for carried in found:
        name = str(carried.key)
        if mirror.holdings.get(carried.key) is not None:
            report["already"].append(name)
            continue
        wanted = mirror.holdings.wanted.get(name)
        if is_pickle(carried.key.path) and wanted is None:
            report["refused"].append({"file": name, "why": "a pickle format, which runs code when loaded, and no "
                                                           "catalog model asks for it"})
            continue
        if wanted is not None and wanted.scan.lower() == "unsafe":
            report["refused"].append({"file": name, "why": "Hugging Face's scan marks it unsafe"})
            continue
        want = wanted.sha256 if wanted is not None and wanted.sha256 else carried.sha256
        # The copy on the disk is here now: a fetch of the same file from a hub this site cannot reach stops.
        await mirror.fetcher.cancel(carried.key)
        try:
            held = await asyncio.to_thread(_copy, mirror, carried, want)
        except ValueError as e:
            report["refused"].append({"file": name, "why": str(e)})
            continue
        mirror.holdings.add(held)
        await asyncio.to_thread(mirror.holdings.write, mirror.holdings.snapshot())
        report["imported"].append(name)
    return report


def _survey(root: Path) -> tuple[list[Carried], list[dict[str, str]]]:
    manifest = root / "manifest.json"
    if manifest.is_file():
        return _from_manifest(root, manifest)
    repos = [root] if _REPO_DIR.match(root.name) else sorted(p for p in root.iterdir() if _REPO_DIR.match(p.name))
    if not repos and (root / "hub").is_dir():
        repos = sorted(p for p in (root / "hub").iterdir() if _REPO_DIR.match(p.name))
    if not repos:
        raise MirrorError(f"{root} is neither a Hugging Face cache (models--ORG--REPO folders) nor a folder with a "
                          "manifest.json; docs/mirror.md, \"Air-gapped sites\", shows both")
    found, refused = [], []
    for repo_dir in repos:
        m = _REPO_DIR.match(repo_dir.name)
        assert m is not None
        repo = f"{m.group(1)}/{m.group(2)}"
        snapshots = repo_dir / "snapshots"
        for commit_dir in sorted(snapshots.iterdir()) if snapshots.is_dir() else []:
            for file in sorted(p for p in commit_dir.rglob("*") if p.is_file()):
                path = file.relative_to(commit_dir).as_posix()
                blob = os.path.basename(os.readlink(file)) if file.is_symlink() else ""
                try:
                    key = FileKey(repo, commit_dir.name, path)
                except BadKey as e:
                    refused.append({"file": f"{repo}/{commit_dir.name}/{path}", "why": str(e)})
                    continue
                # A disk carried in is not trusted: a link named for the sum of some file of this machine's (a
                # key, a password file) would pass the check and be served to the cluster.
                if repo_dir.resolve() not in file.resolve().parents:
                    refused.append({"file": str(key), "why": f"it links outside {repo_dir}, to {file.resolve()}"})
                    continue
                found.append(Carried(key, file, sha256=blob if _SHA256.match(blob) else "",
                                     git_oid=blob if _SHA1.match(blob) else ""))
    return found, refused


def _from_manifest(root: Path, manifest: Path) -> tuple[list[Carried], list[dict[str, str]]]:
    try:
        rows = json.loads(manifest.read_text()).get("files")
    except (OSError, ValueError, AttributeError) as e:
        raise MirrorError(f"{manifest} cannot be read as the manifest ({e})") from None
    if not isinstance(rows, list):
        raise MirrorError(f"{manifest} has no files list")
    found, refused = [], []
    top = root.resolve()
    for i, row in enumerate(rows):
        try:
            key = FileKey(str(row["repo"]), str(row["commit"]), str(row["path"]))
            file = (root / str(row.get("file") or row["path"])).resolve()
            sha = str(row.get("sha256") or "").lower()
        except (BadKey, KeyError, TypeError) as e:
            refused.append({"file": f"files[{i}]", "why": str(e)})
            continue
        if top not in file.parents:
            refused.append({"file": str(key), "why": f"{row.get('file')} is outside {root}"})
        elif not file.is_file():
            refused.append({"file": str(key), "why": f"{file} is not there"})
        elif not _SHA256.match(sha):
            refused.append({"file": str(key), "why": "the manifest gives no sha256 for it"})
        else:
            found.append(Carried(key, file, sha256=sha))
    return found, refused


def _copy(mirror: Mirror, carried: Carried, want: str) -> Held:
    """Copy into the mirror, hashing on the way; ValueError, and nothing kept, when it is not what it says."""
    target = mirror.holdings.path_of(carried.key)
    part = target.with_name(f".{target.name}.import.tmp")
    part.parent.mkdir(parents=True, exist_ok=True)
    size = carried.file.stat().st_size
    sha256 = hashlib.sha256()
    # Git names a blob by the sha1 of this header and the bytes (what a small file's id in a cache is).
    sha1 = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    try:
        with open(carried.file, "rb") as src, open(part, "wb") as dst:
            while chunk := src.read(_CHUNK):
                sha256.update(chunk)
                sha1.update(chunk)
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        got = sha256.hexdigest()
        if want and got != want:
            raise ValueError(f"its sha256 is {got}, not the {want} published for it")
        if not want and not carried.git_oid:
            raise ValueError("nothing publishes a checksum for it (no pin, no LFS id, no manifest entry)")
        if not want and sha1.hexdigest() != carried.git_oid:
            raise ValueError(f"its git blob id is {sha1.hexdigest()}, not the {carried.git_oid} it is filed under")
        os.replace(part, target)
        discard(target)  # a fetch's part of the same file, stopped above, is not needed now
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return Held(carried.key.repo, carried.key.commit, carried.key.path, size, got, "", f"import of {carried.file}")
