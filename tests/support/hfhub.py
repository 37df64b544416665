"""A Hugging Face Hub stand-in on loopback (aiohttp): the part of the Hub's HTTP protocol a gateway uses
to pin and fetch models, over repositories the test makes.

    hub = Hub()
    repo = hub.repo("acme/tiny", files={"config.json": b"{}", "model.gguf": gguf_bytes()})
    with hub.threaded():                      # or `await hub.start()` ... `await hub.stop()`
        HfApi(endpoint=hub.url, token=False).model_info("acme/tiny").sha == repo.main

What it answers, as huggingface.co does (paths, status codes, JSON field names, headers; checked
against huggingface_hub 2.4's parsers):

    GET       /api/models                                   list_models: search, author, filter, pipeline_tag,
                                                            gated, sort, direction, limit, full, expand; Link pages
    GET       /api/models/{org}/{name}[/revision/{rev}]     model_info: blobs=true, securityStatus=true, expand
    GET       /api/models/{org}/{name}/tree/{rev}[/{path}]  list_repo_tree: recursive, expand; Link pages
    GET|HEAD  /{org}/{name}/resolve/{rev}/{path}            the file itself (git files), or a 302 to the CDN (LFS)
    GET|HEAD  /cdn/{org}/{name}/{sha256}/{filename}         LFS bytes, on a second port (`cdn_url`): see `start`

A revision is `main`, a full commit sha or a unique prefix of 7 or more characters (the Hub has
resolved prefixes since 2023: huggingface_hub issue 197). Unknown repositories answer 401 without a
token and 404 with one, both `X-Error-Code: RepoNotFound`, as the Hub does; a gated repository's
metadata is public and its files need a token registered with `Hub.token`.

Knobs for tests: `fail_next` (the next matching request gets a status), `cut_next` / `stall_next` (a
download stops or pauses after N bytes), `replace` (an upstream commit changing one file), `tamper` (the
CDN sends other bytes than the Hub publishes), and the record of what was asked: `hits`, `count`,
`bytes_served`.

As a process, for the processes of an integration test:

    python -m tests.support.hfhub --port 0 --repos spec.json     # prints "hfhub listening on URL"

`HubProcess` starts that and reads the URL; `load_spec` documents the spec's shape. An in-process
`Hub.threaded()` is as reachable from child processes, and keeps the knobs in the test's hands.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import fnmatch
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
from aiohttp import web
from gguf import GGUFReader, GGUFWriter
from safetensors.numpy import save

from tests.support.processes import end, first_line

# What the Hub stores with git-lfs rather than git: weights by extension (its default .gitattributes),
# and anything of 10 MiB or more, which the Hub refuses to take as a plain git blob.
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".onnx")
LFS_MIN_SIZE = 10 * 1024 * 1024
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES).encode()
# The statuses the Hub's scanners give a file; the repository lists the files with the last three.
SCAN_STATUSES = ("unscanned", "queued", "safe", "error", "caution", "suspicious", "unsafe")
ISSUE_LEVELS = ("caution", "suspicious", "unsafe")
CHUNK = 64 * 1024


def _sha1(data: bytes) -> str:
    # git's object ids, not a secret's digest.
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def git_blob_oid(data: bytes) -> str:
    """The git object id of a file's content, which the Hub gives as a plain file's `oid` and ETag."""
    return _sha1(b"blob %d\0" % len(data) + data)


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The pointer git keeps in place of an LFS file: its oid is the file's `blobId`, its length `pointerSize`."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(path: str, data: bytes) -> bool:
    return path.endswith(LFS_SUFFIXES) or len(data) >= LFS_MIN_SIZE


@dataclass(frozen=True)
class Blob:
    """One file's content as the Hub describes it: `oid` is its git object (the pointer's, for LFS)."""

    data: bytes
    oid: str
    sha256: str | None = None
    pointer_size: int | None = None

    @classmethod
    def of(cls, path: str, data: bytes) -> Blob:
        if not is_lfs(path, data):
            return cls(data, git_blob_oid(data))
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = lfs_pointer(sha256, len(data))
        return cls(data, git_blob_oid(pointer), sha256, len(pointer))

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Commit:
    sha: str
    title: str
    date: dt.datetime
    files: Mapping[str, Blob]
    # path -> the sha of the commit that last changed it, for the tree's `lastCommit`
    changed_in: Mapping[str, str]


class Repo:
    """A model repository: commits in order, `main` at the last, every older one readable by its sha."""

    def __init__(self, repo_id: str, *, private: bool, gated: bool | str, tags: Iterable[str],
                 pipeline_tag: str | None, library_name: str | None, security: Mapping[str, str]) -> None:
        self.id = repo_id
        self.private = private
        # The Hub says how access is granted ("auto" or "manual"), or False.
        self.gated: str | bool = "manual" if gated is True else gated
        self.tags = list(tags)
        self.pipeline_tag = pipeline_tag
        self.library_name = library_name
        # path -> scan status; a path not named here scans "safe". Settable by the test at any time.
        unknown = set(security.values()) - set(SCAN_STATUSES)
        if unknown:
            raise ValueError(f"a file's scan status is one of {', '.join(SCAN_STATUSES)}, got {sorted(unknown)}")
        self.security: dict[str, str] = dict(security)
        self.downloads = 0
        self.likes = 0
        self.commits: dict[str, Commit] = {}
        self._history: list[str] = []
        self._lock = threading.Lock()

    @property
    def main(self) -> str:
        return self._history[-1]

    @property
    def created(self) -> dt.datetime:
        return self.commits[self._history[0]].date

    @property
    def author(self) -> str:
        return self.id.split("/", 1)[0]

    def commit(self, files: Mapping[str, bytes | None], message: str = "Upload files") -> str:
        """Add a commit changing `files` (None deletes one) on top of main, move main to it, return its sha."""
        with self._lock:
            parent = self.commits[self.main] if self._history else None
            tree = dict(parent.files) if parent else {}
            for path, data in files.items():
                if data is None:
                    tree.pop(path, None)
                else:
                    tree[path] = Blob.of(path, data)
            listing = "".join(f"{path} {tree[path].oid}\n" for path in sorted(tree))
            sha = _sha1(((parent.sha if parent else "") + listing).encode())
            changed_in = {path: by for path, by in (parent.changed_in.items() if parent else ()) if path in tree}
            changed_in.update({path: sha for path, data in files.items() if data is not None})
            now = dt.datetime.now(dt.UTC).replace(microsecond=0)
            self.commits[sha] = Commit(sha, message, now, tree, changed_in)
            self._history.append(sha)
            return sha

    def resolve(self, revision: str) -> Commit | None:
        """The commit a revision names: main, a full sha, or a unique prefix of at least 7 characters."""
        if revision == "main":
            return self.commits[self.main]
        if revision in self.commits:
            return self.commits[revision]
        if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
            matches = [sha for sha in self._history if sha.startswith(revision)]
            if len(matches) == 1:
                return self.commits[matches[0]]
        return None

    def last_change(self, commit: Commit, path: str) -> Commit:
        """The commit that last changed `path` (a file, or anything under a folder), as of `commit`."""
        prefix = path + "/"
        order = {sha: i for i, sha in enumerate(self._history)}
        shas = [sha for p, sha in commit.changed_in.items() if p == path or p.startswith(prefix)]
        return self.commits[max(shas, key=order.__getitem__)] if shas else commit

    def file_security(self, path: str) -> dict[str, Any]:
        """`securityFileStatus` as the Hub's tree gives it; huggingface_hub reads status, avScan, pickleImportScan."""
        status = self.security.get(path, "safe")
        is_pickle = path.endswith(PICKLE_SUFFIXES)
        scanned = status not in ("unscanned", "queued")
        # A pickle's issue is what its import scan found; any other file's, what the antivirus found.
        av: dict[str, Any] = {"status": "safe" if is_pickle and scanned else status}
        pickle: dict[str, Any] = {"status": status if is_pickle else "unscanned"}
        if scanned:
            av["version"] = "1.4.3/27956"
        if is_pickle and scanned:
            pickle["version"] = "0.0.32"
            pickle["pickleImports"] = (
                [{"module": "builtins", "name": "exec", "safety": "dangerous"}] if status in ISSUE_LEVELS
                else [{"module": "collections", "name": "OrderedDict", "safety": "innocuous"}])
        return {"status": status, "avScan": av, "pickleImportScan": pickle}

    def repo_security(self, commit: Commit) -> dict[str, Any]:
        """`securityRepoStatus`: whether every scan is done, and the files with an issue and its level."""
        statuses = {path: self.security.get(path, "safe") for path in sorted(commit.files)}
        return {
            "scansDone": all(status != "queued" for status in statuses.values()),
            "filesWithIssues": [{"path": path, "level": status}
                                for path, status in statuses.items() if status in ISSUE_LEVELS],
        }


# Weights the gateway's own readers can parse.

def gguf_bytes(*, tensors: Mapping[str, np.ndarray] | None = None, parameters: int | None = None,
               architecture: str = "llama", name: str = "tiny", context_length: int = 2048,
               block_count: int = 1, embedding_length: int = 16, head_count: int = 2, head_count_kv: int = 2,
               chat_template: str | None = None) -> bytes:
    """A small valid GGUF: llama's metadata keys and `tensors` (by default an embedding and a norm, about
    `parameters` elements in all when given, rounded up to whole rows of `embedding_length`)."""
    if tensors is None:
        rows = 32 if parameters is None else max(1, -(-(parameters - embedding_length) // embedding_length))
        tensors = {
            "token_embd.weight": np.linspace(-1, 1, rows * embedding_length, dtype=np.float32)
            .reshape(rows, embedding_length),
            "output_norm.weight": np.ones(embedding_length, dtype=np.float32),
        }
    with tempfile.TemporaryDirectory(prefix="hfhub-gguf-") as folder:
        path = Path(folder) / "model.gguf"
        writer = GGUFWriter(path, architecture)
        writer.add_name(name)
        writer.add_context_length(context_length)
        writer.add_block_count(block_count)
        writer.add_embedding_length(embedding_length)
        writer.add_head_count(head_count)
        writer.add_head_count_kv(head_count_kv)
        if chat_template is not None:
            writer.add_chat_template(chat_template)
        for tensor_name, array in tensors.items():
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def safetensors_bytes(tensors: Mapping[str, np.ndarray] | None = None,
                      metadata: Mapping[str, str] | None = None) -> bytes:
    """A safetensors file of `tensors` (by default two small float32 ones) and `metadata`."""
    if tensors is None:
        tensors = {"embed.weight": np.arange(32, dtype=np.float32).reshape(8, 4),
                   "norm.weight": np.ones(4, dtype=np.float32)}
    return save(dict(tensors), metadata=dict(metadata or {"format": "pt"}))


def big_file(size: int, seed: int = 0) -> bytes:
    """`size` bytes, the same for the same seed, that do not compress: for range, resume and LFS-by-size tests."""
    return random.Random(seed).randbytes(size)


def gguf_summary(data: bytes) -> dict[str, Any]:
    """ModelInfo.gguf as the Hub computes it from the file: parameter total, architecture, context length."""
    # GGUFReader memory-maps a path; it cannot read from bytes.
    with tempfile.NamedTemporaryFile(prefix="hfhub-", suffix=".gguf") as f:
        f.write(data)
        f.flush()
        reader = GGUFReader(f.name)
        fields = {key: value.contents() for key, value in reader.fields.items() if not key.startswith("GGUF.")}
        total = sum(int(tensor.n_elements) for tensor in reader.tensors)
    architecture = fields.get("general.architecture")
    summary: dict[str, Any] = {"total": total, "architecture": architecture}
    if f"{architecture}.context_length" in fields:
        summary["context_length"] = int(fields[f"{architecture}.context_length"])
    if "tokenizer.chat_template" in fields:
        summary["chat_template"] = fields["tokenizer.chat_template"]
    return summary


def safetensors_counts(data: bytes) -> dict[str, int]:
    """Parameters per dtype in one safetensors file, read from its header (an 8-byte length, then JSON)."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    counts: dict[str, int] = {}
    for key, info in header.items():
        if key != "__metadata__":
            counts[info["dtype"]] = counts.get(info["dtype"], 0) + int(np.prod(info["shape"], dtype=np.int64))
    return counts


@dataclass
class Hit:
    """One request the stand-in answered. `kind`: models, model_info, tree, resolve, cdn or other."""

    method: str
    path: str
    kind: str
    status: int = 0
    bytes: int = 0
    range: str | None = None


@dataclass
class _Failure:
    glob: str
    status: int
    method: str | None
    times: int


@dataclass
class _Interruption:
    glob: str
    after_bytes: int
    stall_s: float
    cut: bool
    times: int


# A handler: the request, its decoded path segments, and its record to fill in (bytes sent).
_Answer = Callable[[web.Request, list[str], Hit], Awaitable[web.StreamResponse]]


class _Refusal(Exception):
    """An error answer the way the Hub gives it: the status, X-Error-Code and X-Error-Message headers,
    and {"error": message}; hf_raise_for_status picks its exception from the code."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, dict(headers or {})

    def response(self, method: str) -> web.Response:
        headers = {"X-Error-Message": self.message, **self.headers}
        if self.code is not None:
            headers["X-Error-Code"] = self.code
        body = b"" if method == "HEAD" else json.dumps({"error": self.message}).encode()
        return web.Response(status=self.status, headers=headers, body=body, content_type="application/json")


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    return int(json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"])


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


class Hub:
    """Repositories, tokens and knobs, served by `start()` (async) or `threaded()` (for sync clients)."""

    def __init__(self, *, tree_page_size: int = 1000, expanded_tree_page_size: int = 50,
                 models_page_size: int = 1000) -> None:
        self.repos: dict[str, Repo] = {}
        # The Hub pages a tree at 1000 entries, 50 when expanded (huggingface_hub's list_repo_tree says so).
        self.tree_page_size = tree_page_size
        self.expanded_tree_page_size = expanded_tree_page_size
        self.models_page_size = models_page_size
        self.hits: list[Hit] = []
        self._tokens: dict[str, frozenset[str] | None] = {}
        self._failures: list[_Failure] = []
        self._tampered: dict[str, bytes] = {}
        self._interruptions: list[_Interruption] = []
        self._summaries: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._cdn_port = 0
        self.host = "127.0.0.1"

    # What the test makes.

    def repo(self, org_name: str, *, files: Mapping[str, bytes] | None = None, private: bool = False,
             gated: bool | str = False, tags: Iterable[str] = (), pipeline_tag: str | None = None,
             library_name: str | None = None, security: Mapping[str, str] | None = None) -> Repo:
        """A new repository whose first commit holds `.gitattributes` (as every Hub repo's does) and `files`."""
        if org_name.count("/") != 1:
            raise ValueError(f"a repository is named org/name, got {org_name!r}")
        repo = Repo(org_name, private=private, gated=gated, tags=tags, pipeline_tag=pipeline_tag,
                    library_name=library_name, security=security or {})
        repo.commit({".gitattributes": GITATTRIBUTES, **(files or {})}, message="initial commit")
        self.repos[org_name] = repo
        return repo

    def replace(self, org_name: str, filename: str, data: bytes) -> str:
        """An upstream commit that changes one file; its sha."""
        return self.repos[org_name].commit({filename: data}, message=f"Update {filename}")

    def tamper(self, org_name: str, filename: str, data: bytes, revision: str = "main") -> None:
        """Have the CDN send `data` for the file as it is at `revision`, while the Hub still publishes the file's
        own sha256 and size: what a changed CDN object, mirror or proxy in between would hand a node."""
        commit = self.repos[org_name].resolve(revision)
        blob = commit.files.get(filename) if commit is not None else None
        if blob is None or blob.sha256 is None:
            raise ValueError(f"{org_name} has no LFS file {filename} at {revision}")
        with self._lock:
            self._tampered[blob.sha256] = data

    def token(self, value: str | None = None, *, repos: Iterable[str] | None = None) -> str:
        """Register a token (`Authorization: Bearer …`) that opens private and gated repositories: all of them,
        or only `repos`. Any other token is refused as the Hub refuses one it does not know."""
        value = value or "hf_" + os.urandom(16).hex()
        self._tokens[value] = None if repos is None else frozenset(repos)
        return value

    # Knobs.

    def fail_next(self, path_glob: str, status: int, *, times: int = 1, method: str | None = None) -> None:
        """Answer the next `times` requests whose path matches `path_glob` (fnmatch; `*` crosses `/`) with
        `status`, before anything else is looked at."""
        with self._lock:
            self._failures.append(_Failure(path_glob, status, method, times))

    def cut_next(self, path_glob: str, after_bytes: int, *, times: int = 1, stall_s: float = 0.0) -> None:
        """Send only `after_bytes` of the next matching download's body (after `stall_s`), then drop the
        connection, as a network that breaks mid-file does."""
        with self._lock:
            self._interruptions.append(_Interruption(path_glob, after_bytes, stall_s, True, times))

    def stall_next(self, path_glob: str, after_bytes: int, seconds: float, *, times: int = 1) -> None:
        """Pause the next matching download for `seconds` after `after_bytes`, then send the rest."""
        with self._lock:
            self._interruptions.append(_Interruption(path_glob, after_bytes, seconds, False, times))

    # What the test reads.

    def count(self, kind: str | None = None, *, method: str | None = None, path: str = "*",
              status: int | None = None) -> int:
        """How many requests of a kind (models, model_info, tree, resolve, cdn) matched."""
        with self._lock:
            return sum(1 for hit in self.hits
                       if (kind is None or hit.kind == kind) and (method is None or hit.method == method)
                       and (status is None or hit.status == status) and fnmatch.fnmatchcase(hit.path, path))

    def bytes_served(self, path: str = "*") -> int:
        """File bytes sent in bodies (resolve and cdn), for requests whose path matches."""
        with self._lock:
            return sum(hit.bytes for hit in self.hits if fnmatch.fnmatchcase(hit.path, path))

    # Serving.

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self.host}:{self._cdn_port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0, cdn_port: int = 0) -> Hub:
        """Listen on `port` (0: one the kernel gives) for the Hub, and on `cdn_port` for the LFS CDN.

        The CDN must be another origin: huggingface_hub's HEAD follows a redirect that stays on the
        Hub's origin and then reads X-Repo-Commit and X-Linked-* from the CDN's answer, which has none;
        the real CDN is another host, where it stops and reads them from the 302.
        """
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.host = host
        self._port = await self._listen(host, port)
        self._cdn_port = await self._listen(host, cdn_port)
        return self

    async def _listen(self, host: str, port: int) -> int:
        assert self._runner is not None
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @contextlib.contextmanager
    def threaded(self) -> Iterator[Hub]:
        """Serve from a thread with its own event loop while the block runs: for sync clients (huggingface_hub)."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="hfhub", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(10)
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        # The raw path: a revision comes percent-encoded whole ("refs%2Fpr%2F1") and must stay one segment.
        segments = [unquote(s) for s in request.rel_url.raw_path.split("/")[1:]]
        path = "/" + "/".join(segments)
        kind, answer = self._route(request.method, segments)
        hit = Hit(request.method, path, kind, range=request.headers.get("Range"))
        with self._lock:
            self.hits.append(hit)
        failure = self._take_failure(path, request.method)
        try:
            if failure is not None:
                raise _Refusal(failure, None, f"hfhub: failing {path} as the test asked")
            if answer is None:
                raise _Refusal(404, None, "Sorry, we can't find the page you are looking for.")
            response = await answer(request, segments, hit)
        except _Refusal as refusal:
            response = refusal.response(request.method)
        hit.status = response.status
        return response

    def _route(self, method: str, segments: list[str]) -> tuple[str, _Answer | None]:
        reading = method in ("GET", "HEAD")
        if segments[:2] == ["api", "models"] and method == "GET":
            if len(segments) == 2:
                return "models", self._list_models
            if len(segments) == 4 or (len(segments) >= 6 and segments[4] == "revision"):
                return "model_info", self._model_info
            if len(segments) >= 6 and segments[4] == "tree":
                return "tree", self._tree
        if segments[:1] == ["cdn"] and len(segments) >= 5 and reading:
            return "cdn", self._cdn
        if len(segments) >= 5 and segments[2] == "resolve" and reading:
            return "resolve", self._resolve
        return "other", None

    def _take_failure(self, path: str, method: str) -> int | None:
        with self._lock:
            for failure in self._failures:
                if fnmatch.fnmatchcase(path, failure.glob) and failure.method in (None, method):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    return failure.status
        return None

    def _take_interruption(self, path: str) -> _Interruption | None:
        with self._lock:
            for interruption in self._interruptions:
                if fnmatch.fnmatchcase(path, interruption.glob):
                    interruption.times -= 1
                    if interruption.times <= 0:
                        self._interruptions.remove(interruption)
                    return interruption
        return None

    # Access, as the Hub decides it.

    def _bearer(self, request: web.Request) -> tuple[str | None, bool]:
        """The token sent, if any, and whether it is one the Hub knows (an unknown one is refused outright)."""
        header = request.headers.get("Authorization", "")
        if not header.lower().startswith("bearer "):
            return None, False
        token = header[7:].strip()
        if token not in self._tokens:
            raise _Refusal(401, None, "Invalid credentials in Authorization header")
        return token, True

    def _opens(self, token: str | None, repo: Repo) -> bool:
        if token is None:
            return False
        allowed = self._tokens[token]
        return allowed is None or repo.id in allowed

    def _visible_repo(self, request: web.Request, org: str, name: str) -> Repo:
        """The repository, or RepoNotFound: 401 to an anonymous caller, 404 to a signed-in one, as the Hub
        answers both for a missing repository and for a private one the caller may not see."""
        token, signed_in = self._bearer(request)
        repo = self.repos.get(f"{org}/{name}")
        if repo is None or (repo.private and not self._opens(token, repo)):
            message = "Repository not found" if signed_in else "Invalid username or password."
            raise _Refusal(404 if signed_in else 401, "RepoNotFound", message)
        return repo

    def _ungated(self, request: web.Request, repo: Repo) -> None:
        """A gated repository's files: 401 GatedRepo without a token, 403 with one not on its list."""
        if repo.gated is False:
            return
        token, signed_in = self._bearer(request)
        if self._opens(token, repo):
            return
        if not signed_in:
            raise _Refusal(401, "GatedRepo", f"Access to model {repo.id} is restricted. You must have access to it "
                                             "and be authenticated to access it. Please log in.")
        raise _Refusal(403, "GatedRepo", f"Access to model {repo.id} is restricted and you are not in the "
                                         f"authorized list. Visit https://huggingface.co/{repo.id} to ask for access.")

    @staticmethod
    def _commit(repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _Refusal(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # /api/models/{org}/{name}[/revision/{rev}]

    async def _model_info(self, request: web.Request, segments: list[str], hit: Hit) -> web.Response:
        repo = self._visible_repo(request, segments[2], segments[3])
        commit = self._commit(repo, "/".join(segments[5:]) if len(segments) > 4 else "main")
        query = request.rel_url.query
        info = self._describe(repo, commit, full=True, blobs=_truthy(query.get("blobs")))
        if _truthy(query.get("securityStatus")):
            info["securityRepoStatus"] = repo.repo_security(commit)
        info = self._expanded(info, query.getall("expand", []) + query.getall("expand[]", []))
        return web.json_response(info)

    def _describe(self, repo: Repo, commit: Commit, *, full: bool, blobs: bool = False) -> dict[str, Any]:
        """A model entry with the Hub's field names; `full` adds what model_info and list_models(full=True) get."""
        info: dict[str, Any] = {
            "_id": _sha1(repo.id.encode())[:24],
            "id": repo.id,
            "modelId": repo.id,
            "likes": repo.likes,
            "trendingScore": 0,
            "private": repo.private,
            "downloads": repo.downloads,
            "tags": self._tags(repo, commit),
            "pipeline_tag": repo.pipeline_tag,
            "library_name": repo.library_name,
            "createdAt": _iso(repo.created),
        }
        if not full:
            return info
        info.update({
            "author": repo.author,
            "sha": commit.sha,
            "lastModified": _iso(commit.date),
            "gated": repo.gated,
            "disabled": False,
            "siblings": [self._sibling(path, blob, blobs) for path, blob in sorted(commit.files.items())],
            "spaces": [],
            "usedStorage": sum(blob.size for blob in commit.files.values()),
        })
        info.update(self._weights_summary(commit))
        return info

    @staticmethod
    def _tags(repo: Repo, commit: Commit) -> list[str]:
        # The Hub adds the library, the task, the weight formats it finds and the region to the author's tags.
        found = [fmt for fmt in ("gguf", "safetensors") if any(p.endswith("." + fmt) for p in commit.files)]
        extra = [t for t in (repo.library_name, repo.pipeline_tag) if t]
        return list(dict.fromkeys([*repo.tags, *extra, *found, "region:us"]))

    @staticmethod
    def _sibling(path: str, blob: Blob, blobs: bool) -> dict[str, Any]:
        sibling: dict[str, Any] = {"rfilename": path}
        if blobs:
            sibling.update(size=blob.size, blobId=blob.oid)
            if blob.sha256 is not None:
                sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        return sibling

    def _weights_summary(self, commit: Commit) -> dict[str, Any]:
        """`gguf` (from the first .gguf) and `safetensors` (over every .safetensors), as the Hub parses them."""
        summary: dict[str, Any] = {}
        ggufs = sorted(p for p in commit.files if p.endswith(".gguf"))
        if ggufs:
            summary["gguf"] = self._cached(commit.files[ggufs[0]], gguf_summary)
        counts: dict[str, int] = {}
        for path in sorted(p for p in commit.files if p.endswith(".safetensors")):
            for dtype, n in self._cached(commit.files[path], safetensors_counts).items():
                counts[dtype] = counts.get(dtype, 0) + n
        if counts:
            summary["safetensors"] = {"parameters": counts, "total": sum(counts.values())}
        return summary

    def _cached(self, blob: Blob, parse: Callable[[bytes], Any]) -> Any:
        key = f"{parse.__name__}:{blob.sha256 or blob.oid}"
        with self._lock:
            if key not in self._summaries:
                self._summaries[key] = parse(blob.data)
            return self._summaries[key]

    @staticmethod
    def _expanded(info: dict[str, Any], expand: list[str]) -> dict[str, Any]:
        """With `expand`, the Hub returns only the properties asked for (and the ids)."""
        if not expand:
            return info
        return {key: value for key, value in info.items() if key in ("_id", "id", *expand)}

    # /api/models

    async def _list_models(self, request: web.Request, segments: list[str], hit: Hit) -> web.Response:
        token, _ = self._bearer(request)
        query = request.rel_url.query
        entries = [repo for repo in self.repos.values() if not repo.private or self._opens(token, repo)]
        entries = [repo for repo in entries if self._matches(repo, query)]
        entries = self._sorted(entries, query.get("sort"), query.get("direction"))
        limit = int(query["limit"]) if "limit" in query else None
        page_size = min(self.models_page_size, limit) if limit else self.models_page_size
        start = _offset(query.get("cursor"))
        page = entries[start:start + page_size]
        full = _truthy(query.get("full"))
        expand = query.getall("expand", []) + query.getall("expand[]", [])
        body = [self._expanded(self._describe(repo, repo.commits[repo.main], full=full or bool(expand)), expand)
                for repo in page]
        return web.json_response(body, headers=self._next_link(request, start + page_size, len(entries)))

    def _matches(self, repo: Repo, query: Any) -> bool:
        commit = repo.commits[repo.main]
        tags = set(self._tags(repo, commit))
        search = query.get("search", "").lower()
        if search and search not in repo.id.lower():
            return False
        if "author" in query and repo.author.lower() != query["author"].lower():
            return False
        if not all(wanted in tags for wanted in query.getall("filter", [])):
            return False
        if "pipeline_tag" in query and repo.pipeline_tag != query["pipeline_tag"]:
            return False
        return "gated" not in query or _truthy(query["gated"]) == (repo.gated is not False)

    @staticmethod
    def _sorted(repos: list[Repo], sort: str | None, direction: str | None) -> list[Repo]:
        """Newest first by the key; list_models sends createdAt, lastModified, downloads, likes, trendingScore."""
        if sort is None:
            return repos
        keys: dict[str, Any] = {
            "downloads": lambda r: r.downloads,
            "likes": lambda r: r.likes,
            "createdAt": lambda r: r.created,
            "lastModified": lambda r: r.commits[r.main].date,
            "trendingScore": lambda r: 0,
            "id": lambda r: r.id,
        }
        key = keys.get(sort, keys["id"])
        return sorted(repos, key=key, reverse=direction != "1")

    def _next_link(self, request: web.Request, offset: int, total: int) -> dict[str, str]:
        """The Link header huggingface_hub's paginate follows: the same query with the next page's cursor."""
        if offset >= total:
            return {}
        following = request.rel_url.update_query(cursor=_cursor(offset))
        return {"Link": f'<{self.url}{following}>; rel="next"'}

    # /api/models/{org}/{name}/tree/{rev}[/{path}]

    async def _tree(self, request: web.Request, segments: list[str], hit: Hit) -> web.Response:
        repo = self._visible_repo(request, segments[2], segments[3])
        commit = self._commit(repo, segments[5])
        folder = "/".join(segments[6:]).strip("/")
        query = request.rel_url.query
        expand = _truthy(query.get("expand"))
        entries = self._tree_entries(commit, folder, recursive=_truthy(query.get("recursive")))
        if entries is None:
            raise _Refusal(404, "EntryNotFound", f"{folder} does not exist on \"{segments[5]}\"",
                           {"X-Repo-Commit": commit.sha})
        page_size = self.expanded_tree_page_size if expand else self.tree_page_size
        start = _offset(query.get("cursor"))
        body = [self._tree_entry(repo, commit, path, expand) for path in entries[start:start + page_size]]
        return web.json_response(body, headers=self._next_link(request, start + page_size, len(entries)))

    @staticmethod
    def _folders(commit: Commit) -> set[str]:
        return {"/".join(path.split("/")[:i]) for path in commit.files for i in range(1, path.count("/") + 1)}

    def _tree_entries(self, commit: Commit, folder: str, *, recursive: bool) -> list[str] | None:
        """The paths listed under `folder` (each folder before what it holds), or None when it is no folder."""
        folders = self._folders(commit)
        if folder and folder not in folders:
            return None
        prefix = folder + "/" if folder else ""
        inside = [p for p in sorted(folders | set(commit.files)) if p.startswith(prefix)]
        if not recursive:
            inside = [p for p in inside if "/" not in p[len(prefix):]]
        return inside

    def _tree_entry(self, repo: Repo, commit: Commit, path: str, expand: bool) -> dict[str, Any]:
        blob = commit.files.get(path)
        if blob is None:
            entry: dict[str, Any] = {"type": "directory", "oid": self._tree_oid(commit, path), "size": 0, "path": path}
        else:
            entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.sha256 is not None:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        if expand:
            last = repo.last_change(commit, path)
            entry["lastCommit"] = {"id": last.sha, "title": last.title, "date": _iso(last.date)}
            if blob is not None:
                entry["securityFileStatus"] = repo.file_security(path)
        return entry

    def _tree_oid(self, commit: Commit, folder: str) -> str:
        """A folder's git tree object id, computed as git does from its entries."""
        prefix = folder + "/"
        names = {p[len(prefix):].split("/")[0] for p in list(commit.files) + list(self._folders(commit))
                 if p.startswith(prefix)}
        body = b""
        # git sorts a tree's entries by name, a folder's name as if it ended in "/".
        for name in sorted(names, key=lambda n: n + ("" if prefix + n in commit.files else "/")):
            full = prefix + name
            if full in commit.files:
                body += b"100644 " + name.encode() + b"\0" + bytes.fromhex(commit.files[full].oid)
            else:
                body += b"40000 " + name.encode() + b"\0" + bytes.fromhex(self._tree_oid(commit, full))
        return _sha1(b"tree %d\0" % len(body) + body)

    # /{org}/{name}/resolve/{rev}/{path} and the CDN

    async def _resolve(self, request: web.Request, segments: list[str], hit: Hit) -> web.StreamResponse:
        repo = self._visible_repo(request, segments[0], segments[1])
        commit = self._commit(repo, segments[3])
        path = "/".join(segments[4:])
        self._ungated(request, repo)
        blob = commit.files.get(path)
        if blob is None:
            raise _Refusal(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        headers = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes"}
        if blob.sha256 is None:
            headers["ETag"] = f'"{blob.oid}"'
            return await self._send(request, hit, blob.data, path, headers)
        # An LFS file: the Hub answers with its sha256 and size on the 302 itself; the CDN has neither header.
        filename = path.rsplit("/", 1)[-1]
        location = f"{self.cdn_url}/cdn/{quote(repo.id)}/{blob.sha256}/{quote(filename)}"
        headers.update({
            "ETag": f'"{blob.oid}"',
            "X-Linked-Etag": f'"{blob.sha256}"',
            "X-Linked-Size": str(blob.size),
            "Location": location,
        })
        body = b"" if request.method == "HEAD" else f"Found. Redirecting to {location}".encode()
        return web.Response(status=302, headers=headers, body=body, content_type="text/plain")

    async def _cdn(self, request: web.Request, segments: list[str], hit: Hit) -> web.StreamResponse:
        repo = self.repos.get(f"{segments[1]}/{segments[2]}")
        sha256 = segments[3]
        blob = next((b for c in (repo.commits.values() if repo else ()) for b in c.files.values()
                     if b.sha256 == sha256), None)
        if blob is None:
            raise _Refusal(404, None, "NoSuchKey")
        headers = {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"}
        with self._lock:
            data = self._tampered.get(sha256, blob.data)
        return await self._send(request, hit, data, "/".join(segments[4:]), headers)

    async def _send(self, request: web.Request, hit: Hit, data: bytes, filename: str,
                    headers: dict[str, str]) -> web.StreamResponse:
        """A file's bytes, whole (200) or the Range asked for (206; 416 when it lies past the end)."""
        name = filename.rsplit("/", 1)[-1]
        headers["Content-Disposition"] = f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";"
        start, end = 0, len(data)
        status = 200
        wanted = _byte_range(request.headers.get("Range"), len(data))
        if wanted is not None:
            start, end = wanted
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        response = web.StreamResponse(status=status, headers=headers)
        response.content_type = "application/octet-stream"
        response.content_length = end - start
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        body = memoryview(data)[start:end]
        interruption = self._take_interruption(hit.path)
        stop_at = len(body) if interruption is None else min(interruption.after_bytes, len(body))
        await self._write(response, body[:stop_at], hit)
        if interruption is not None:
            await asyncio.sleep(interruption.stall_s)
            if interruption.cut:
                # close(), not abort(): what was written still goes out, then the client reads a short body
                # (httpx: RemoteProtocolError), which huggingface_hub resumes; a reset it would not resume.
                assert request.transport is not None
                request.transport.close()
                return response
        await self._write(response, body[stop_at:], hit)
        await response.write_eof()
        return response

    async def _write(self, response: web.StreamResponse, body: memoryview, hit: Hit) -> None:
        for offset in range(0, len(body), CHUNK):
            chunk = body[offset:offset + CHUNK]
            await response.write(chunk)
            with self._lock:
                hit.bytes += len(chunk)


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """A single `bytes=a-b`, `a-` or `-n` range as [start, end); None to send it all (no Range, or several,
    which a server may answer whole). One that starts past the end is refused with 416."""
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes="):].strip().partition("-")
    try:
        if first == "":
            start, end = max(0, size - int(last)), size
        else:
            start = int(first)
            end = min(size, int(last) + 1) if last else size
    except ValueError:
        return None
    if start >= size or start >= end:
        raise _Refusal(416, None, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
    return start, end


# As a process.

def load_spec(hub: Hub, spec: Mapping[str, Any]) -> Hub:
    """Make the repositories a JSON spec describes:

        {"repos": {"acme/tiny": {"files": {"config.json": "{}", "model.gguf": {"gguf": {"context_length": 4096}},
                                           "weights.safetensors": {"safetensors": {"w": [4, 4]}},
                                           "big.bin": {"random": 2097152, "seed": 1}, "raw.bin": {"base64": "AAE="}},
                                 "private": false, "gated": false, "tags": [], "pipeline_tag": null,
                                 "library_name": null, "security": {"big.bin": "unsafe"},
                                 "commits": [{"message": "v2", "files": {"raw.bin": null}}]}},
         "tokens": ["hf_test"], "tree_page_size": 1000, "models_page_size": 1000}
    """
    for key in ("tree_page_size", "expanded_tree_page_size", "models_page_size"):
        if key in spec:
            setattr(hub, key, int(spec[key]))
    for token in spec.get("tokens", []):
        hub.token(token)
    for repo_id, described in spec.get("repos", {}).items():
        files = {path: _spec_file(value) for path, value in described.get("files", {}).items()}
        repo = hub.repo(repo_id, files=files, private=described.get("private", False),  # type: ignore[arg-type]
                        gated=described.get("gated", False), tags=described.get("tags", ()),
                        pipeline_tag=described.get("pipeline_tag"), library_name=described.get("library_name"),
                        security=described.get("security"))
        for commit in described.get("commits", []):
            repo.commit({path: _spec_file(value) for path, value in commit["files"].items()},
                        message=commit.get("message", "Upload files"))
    return hub


def _spec_file(value: Any) -> bytes | None:
    if value is None or isinstance(value, str):
        return None if value is None else value.encode()
    if "text" in value:
        return str(value["text"]).encode()
    if "base64" in value:
        return base64.b64decode(value["base64"])
    if "random" in value:
        return big_file(int(value["random"]), int(value.get("seed", 0)))
    if "gguf" in value:
        return gguf_bytes(**value["gguf"])
    if "safetensors" in value:
        shapes = value["safetensors"] or {}
        tensors = {name: np.ones(shape, dtype=np.float32) for name, shape in shapes.items()} or None
        return safetensors_bytes(tensors)
    if "path" in value:
        return Path(value["path"]).read_bytes()
    raise ValueError(f"a file in the spec is a string or one of text, base64, random, gguf, safetensors, "
                     f"path: {value!r}")


class HubProcess:
    """`python -m tests.support.hfhub` as a child process; `url` once it listens. Ended by its own PID."""

    def __init__(self, spec_path: Path, *, port: int = 0) -> None:
        self.args = [sys.executable, "-m", "tests.support.hfhub", "--port", str(port), "--repos", str(spec_path)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.stderr = b""

    def start(self, timeout: float = 30) -> HubProcess:
        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(self.args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = first_line(self.proc.stdout.fileno(), timeout)
        if b" listening on " not in line:
            self.stop()
            raise AssertionError(f"hfhub did not start: {line!r} {self.stderr!r}")
        self.url = line.decode().strip().rsplit(" ", 1)[1]
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        _, self.stderr = end(self.proc)
        self.proc = None


async def _serve(hub: Hub, host: str, port: int, cdn_port: int) -> None:
    await hub.start(host, port, cdn_port)
    print(f"hfhub listening on {hub.url}", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    await hub.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.hfhub",
                                     description="A Hugging Face Hub stand-in for tests, on loopback.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="the Hub's port (0: one the kernel gives)")
    parser.add_argument("--cdn-port", type=int, default=0, help="the LFS CDN's port (0: one the kernel gives)")
    parser.add_argument("--repos", type=Path, help="a JSON spec of repositories (see load_spec)")
    args = parser.parse_args(argv)
    hub = Hub()
    if args.repos is not None:
        try:
            load_spec(hub, json.loads(args.repos.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"hfhub: {args.repos}: {error}", file=sys.stderr)
            return 2
    asyncio.run(_serve(hub, args.host, args.port, args.cdn_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
