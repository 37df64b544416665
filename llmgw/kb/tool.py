"""`llmgw-kb sync`: a person's folders kept in a knowledge base, from their own machine (docs/knowledge.md).

The documents are read and cut into passages here; only the passages
leave the machine, one file of them a document (its path, then
PASSAGES_SUFFIX), with the document's path, sha256 and size as the file's
attributes in the knowledge base. The gateway embeds them as the key
given, so its limits, budget and guardrails hold. A document is sent again
only when its sha256 changed; one deleted here is deleted there. A request
told to wait (429, or 503/504 with Retry-After) is sent again, for
GIVE_UP_AFTER seconds at most.

Only the standard library speaks to the gateway: the tool runs on people's
machines from llmgw.pyz, where nothing else need be installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw.kb.documents import pages_of, reads
from llmgw.kb.extract import Unreadable
from llmgw.kb.passages import cut
from llmgw.store import PASSAGES_SUFFIX

GIVE_UP_AFTER = 900.0  # seconds a request is sent again while the gateway says to wait
MOST_WAIT = 60.0
POLL_EVERY = 0.5
PAGE = 100


class KbToolError(Exception):
    """What went wrong, in a sentence for the person running the tool."""


@dataclass(frozen=True)
class Document:
    path: str  # its name in the knowledge base: the path under the folder, with forward slashes
    file: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class Remote:
    path: str
    file_id: str
    sha256: str
    status: str


class Gateway:
    """The client API, as llmgw-kb calls it."""

    def __init__(self, url: str, key: str, timeout: float = 120.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise KbToolError(f"--url is the gateway's http:// or https:// address, not {url!r}")
        self.url = url.rstrip("/").removesuffix("/v1")
        self.key, self.timeout, self.sleep = key, timeout, sleep

    def call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        return self._send(method, path, data, "application/json", query)

    def upload(self, name: str, content: bytes) -> str:
        """A file of /v1/files (purpose assistants); its id."""
        boundary = "llmgw-kb-" + secrets.token_hex(12)
        quoted = name.replace('"', "%22").replace("\r", "").replace("\n", "")
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'.encode(),
                 f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                 f"Content-Type: application/jsonl\r\n\r\n".encode(), content, f"\r\n--{boundary}--\r\n".encode()]
        answer = self._send("POST", "/v1/files", b"".join(parts), f"multipart/form-data; boundary={boundary}", None)
        return str(answer["id"])

    def _send(self, method: str, path: str, data: bytes | None, kind: str, query: dict[str, Any] | None) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": kind}
        deadline = time.monotonic() + GIVE_UP_AFTER
        while True:
            # http or https only: checked when the Gateway was made.
            request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                    raw = answer.read()
                return json.loads(raw) if raw else {}
            except urllib.error.HTTPError as e:
                said = _message(e)
                after = e.headers.get("Retry-After") if e.headers else None
                if e.code in (429, 503, 504) and time.monotonic() < deadline:
                    wait = float(after) if after and after.replace(".", "", 1).isdigit() else 2.0
                    self.sleep(min(MOST_WAIT, max(0.1, wait)))
                    continue
                raise KbToolError(f"{method} {path}: {e.code} {said}") from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                raise KbToolError(f"the gateway at {self.url} cannot be reached ({reason}); check --url") from None


def _message(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        return error.reason or ""
    found = body.get("error") if isinstance(body, dict) else None
    return str(found.get("message")) if isinstance(found, dict) and found.get("message") else str(error.reason)


# -- the folders here ---------------------------------------------------------------

def _pattern(glob: str) -> re.Pattern[str]:
    """A glob as a path pattern: `*` within a name, `**` across folders, `?` one character."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, glob: str) -> bool:
    """`*.pdf` matches a file's name wherever it is; a glob with a slash matches the path from the folder."""
    if "/" not in glob:
        return bool(_pattern(glob).match(path.rsplit("/", 1)[-1]))
    return bool(_pattern(glob).match(path))


def scan(folders: list[Path], include: list[str], exclude: list[str], hidden: bool) -> list[Document]:
    """The documents of the folders that would be kept: read here, included, not excluded."""
    found: list[Document] = []
    for folder in folders:
        if not folder.is_dir():
            raise KbToolError(f"{folder} is not a folder")
        prefix = f"{folder.resolve().name}/" if len(folders) > 1 else ""
        for root, dirs, files in os.walk(folder):
            if not hidden:
                dirs[:] = [d for d in dirs if not d.startswith(".")]
            dirs.sort()
            for name in sorted(files):
                if not hidden and name.startswith("."):
                    continue
                file = Path(root) / name
                path = prefix + file.relative_to(folder).as_posix()
                if not reads(name) or not file.is_file() or file.is_symlink():
                    continue
                if include and not any(matches(path, g) for g in include):
                    continue
                if any(matches(path, g) for g in exclude):
                    continue
                content = file.read_bytes()
                found.append(Document(path, file, hashlib.sha256(content).hexdigest(), len(content)))
    return sorted(found, key=lambda d: d.path)


def cut_document(document: Document) -> list[tuple[int | None, str]]:
    """The document's passages (page, text), cut here."""
    return [(page, text) for page, body in pages_of(document.path, document.file.read_bytes())
            for text in cut(body)]


def passages_file(cut_passages: Iterable[tuple[int | None, str]]) -> bytes:
    """What leaves the machine for one document: its passages, one JSON object a line."""
    return b"".join(json.dumps({"text": text, "page": page}, ensure_ascii=False).encode() + b"\n"
                    for page, text in cut_passages)


# -- the knowledge base there -------------------------------------------------------

def find_base(gateway: Gateway, name: str, model: str | None) -> str:
    """The id of the key's knowledge base called `name`, made (with `model`) when there is none."""
    found = _existing(gateway, name)
    if found is not None:
        return found
    body: dict[str, Any] = {"name": name}
    if model:
        body["embedding_model"] = model
    return str(gateway.call("POST", "/v1/vector_stores", body)["id"])


def remote_documents(gateway: Gateway, vs_id: str) -> dict[str, Remote]:
    """The documents llmgw-kb put in the knowledge base, by path."""
    found: dict[str, Remote] = {}
    for file in _listed(gateway, f"/v1/vector_stores/{vs_id}/files"):
        attributes = file.get("attributes") or {}
        if isinstance(attributes.get("path"), str) and isinstance(attributes.get("sha256"), str):
            found[attributes["path"]] = Remote(attributes["path"], file["id"], attributes["sha256"],
                                               file.get("status", ""))
    return found


def _listed(gateway: Gateway, path: str) -> Iterable[dict[str, Any]]:
    """Every entry of a list the gateway pages (OpenAI's `after` and `has_more`), a page at a time."""
    after = None
    while True:
        page = gateway.call("GET", path, query={"limit": PAGE, **({"after": after} if after else {})})
        yield from page.get("data", [])
        if not page.get("has_more"):
            return
        after = page.get("last_id")


@dataclass
class Outcome:
    sent: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    passages: int = 0
    bytes_sent: int = 0


def sync(gateway: Gateway, base: str, folders: list[Path], *, model: str | None = None,
         include: list[str] | None = None, exclude: list[str] | None = None, hidden: bool = False,
         dry_run: bool = False, verbose: bool = False, say: Callable[[str], None] = print) -> Outcome:
    """The knowledge base `base` made to hold the folders' documents as they are now."""
    documents = scan(folders, include or [], exclude or [], hidden)
    vs_id = find_base(gateway, base, model) if not dry_run else _existing(gateway, base)
    there = remote_documents(gateway, vs_id) if vs_id else {}
    here = {d.path: d for d in documents}
    outcome = Outcome()
    to_send = [d for d in documents if d.path not in there or there[d.path].sha256 != d.sha256
               or there[d.path].status in ("failed", "cancelled")]
    outcome.unchanged = len(documents) - len(to_send)
    if verbose:
        for d in documents:
            if d not in to_send:
                say(f"unchanged {d.path}")
    waiting: dict[str, tuple[Document, str]] = {}
    for n, document in enumerate(to_send, 1):
        try:
            cut_passages = cut_document(document)
        except Unreadable as e:
            outcome.failed += 1
            say(f"[{n}/{len(to_send)}] {document.path}: not read, {e}")
            continue
        body = passages_file(cut_passages)
        outcome.passages += len(cut_passages)
        outcome.bytes_sent += len(body)
        if dry_run:
            say(f"[{n}/{len(to_send)}] would send {document.path}: {len(cut_passages)} passages, {len(body)} bytes")
            if verbose:
                for line in body.decode().splitlines():
                    say(f"  {line}")
            continue
        assert vs_id is not None  # found or made, when not a dry run
        file_id = gateway.upload(document.path + PASSAGES_SUFFIX, body)
        gateway.call("POST", f"/v1/vector_stores/{vs_id}/files", {
            "file_id": file_id, "attributes": {"path": document.path, "sha256": document.sha256,
                                               "size": document.size}})
        # The version there now stays searchable until this one is: deleted once it has completed, kept if
        # it fails (so a document that fails to import is never lost from the knowledge base).
        old = there.get(document.path)
        waiting[file_id] = (document, old.file_id if old else "")
        say(f"[{n}/{len(to_send)}] {document.path}: {len(cut_passages)} passages sent")
    gone = [r for path, r in there.items() if path not in here]
    for remote in gone:
        if dry_run or vs_id is None:
            say(f"would delete {remote.path}")
        else:
            _delete(gateway, vs_id, remote.file_id)
            say(f"deleted {remote.path}")
        outcome.deleted += 1
    for file_id, (document, old_id) in waiting.items():
        assert vs_id is not None  # something was sent to it
        done = _wait(gateway, vs_id, file_id)
        if done.get("status") != "completed":
            outcome.failed += 1
            error = done.get("last_error") or {}
            kept = ""
            if old_id:
                _delete(gateway, vs_id, file_id)  # the version before answers meanwhile; the next run tries again
                kept = "; the version sent before is kept"
            say(f"{document.path}: {done.get('status')}, {error.get('message', 'no reason given')}{kept}")
            continue
        if old_id:
            _delete(gateway, vs_id, old_id)
        outcome.sent += 1
        for skipped in done.get("skipped_passages") or []:
            where = f"page {skipped['page']}" if skipped.get("page") else f"passage {skipped.get('passage')}"
            say(f"{document.path}, {where}: left out, {skipped.get('message')}")
    return outcome


def _existing(gateway: Gateway, name: str) -> str | None:
    """The id of the key's knowledge base named `name`, or whose id it is (the portal shows ids)."""
    for vs in _listed(gateway, "/v1/vector_stores"):
        if name in (vs.get("name"), vs.get("id")):
            return str(vs["id"])
    return None


def _delete(gateway: Gateway, vs_id: str, file_id: str) -> None:
    """The document's passages out of the knowledge base, and its passages file out of /v1/files."""
    try:
        gateway.call("DELETE", f"/v1/vector_stores/{vs_id}/files/{file_id}")
    except KbToolError:
        pass  # already out of the knowledge base: the file's deletion below takes what is left
    gateway.call("DELETE", f"/v1/files/{file_id}")


def _wait(gateway: Gateway, vs_id: str, file_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + GIVE_UP_AFTER
    while True:
        file = gateway.call("GET", f"/v1/vector_stores/{vs_id}/files/{file_id}")
        if file.get("status") != "in_progress" or time.monotonic() > deadline:
            return dict(file)
        gateway.sleep(POLL_EVERY)
