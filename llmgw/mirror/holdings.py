"""What a mirror holds, wants and has removed: one JSON file beside the files, replaced whole at each change.

    DIR/holdings.json                       the list below
    DIR/files/ORG/REPO/COMMIT/PATH          each file, as Hugging Face names it at the commit it was pinned at

A file is known by its key, `ORG/REPO/COMMIT/PATH`. Three lists:

- held: the files here, each checked against its sha256 before it was listed;
- wanted: what the control planes asked for (the catalog's pins) with the models that use each; fetched when not held;
- removed: a key and when it was removed, so that a peer that still has it (it was down at the time) removes it
  too, rather than this mirror copying it back. Kept for REMOVED_KEPT_S.

The mirror process is the only writer; `llmgw mirror` commands go through its API.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmgw.files import write_atomic

# A peer down for longer than this may copy a removed file back; a month covers any outage anyone would wait out.
REMOVED_KEPT_S = 30 * 86400.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The names the mirror gives its own files beside a file (a download's part and its record, a write's temporary):
# a repository's file named so would be taken for one.
_OWN_FILE = re.compile(r"^\..*\.(part|part\.json|tmp)$|.*\.tmp$")


class BadKey(ValueError):
    """A repository, commit or path that does not name a file the mirror could keep."""


@dataclass(frozen=True)
class FileKey:
    repo: str
    """org/repo as on Hugging Face; url/HOST for a file added from another address."""
    commit: str
    path: str

    def __post_init__(self) -> None:
        org, _, name = self.repo.partition("/")
        if not (_NAME.match(org) and _NAME.match(name)):
            raise BadKey(f"{self.repo!r} is not a repository's name (org/repo)")
        if not _COMMIT.match(self.commit):
            raise BadKey(f"{self.commit!r} is not a commit (40 lowercase hexadecimal digits)")
        parts = self.path.split("/")
        if not self.path or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts) \
                or _OWN_FILE.match(parts[-1]):
            raise BadKey(f"{self.path!r} is not a file's path in a repository")

    def __str__(self) -> str:
        return f"{self.repo}/{self.commit}/{self.path}"

    @classmethod
    def parse(cls, text: str) -> FileKey:
        """ORG/REPO/COMMIT/PATH."""
        parts = text.strip("/").split("/", 3)
        if len(parts) < 4:
            raise BadKey(f"{text!r} is not ORG/REPO/COMMIT/PATH")
        return cls(f"{parts[0]}/{parts[1]}", parts[2], parts[3])


@dataclass
class Held:
    repo: str
    commit: str
    path: str
    size: int
    sha256: str
    scan: str = ""
    """Hugging Face's scan of the file: safe, unsafe, suspicious…; "" where none was given."""
    origin: str = ""
    """Where the bytes came from: the hub, a peer, an import; an address without its query."""
    added_at: float = 0.0

    @property
    def key(self) -> FileKey:
        return FileKey(self.repo, self.commit, self.path)


@dataclass
class Wanted:
    repo: str
    commit: str
    path: str
    size: int = 0
    sha256: str = ""
    scan: str = ""
    models: list[str] = field(default_factory=list)

    @property
    def key(self) -> FileKey:
        return FileKey(self.repo, self.commit, self.path)


def check_sha256(value: str) -> str:
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise BadKey(f"{value[:80]!r} is not a sha256 (64 hexadecimal digits, as sha256sum prints)")
    return value


class Holdings:
    """The mirror's list, in memory and in DIR/holdings.json; `save()` after each change."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.time):
        self.dir = directory
        self.files_dir = directory / "files"
        self.list_file = directory / "holdings.json"
        self.clock = clock
        self.held: dict[str, Held] = {}
        self.wanted: dict[str, Wanted] = {}
        self.removed: dict[str, float] = {}
        self._writing = threading.Lock()
        self._taken = self._written = 0
        self._load()

    def _load(self) -> None:
        self.files_dir.mkdir(parents=True, exist_ok=True)
        try:
            doc = json.loads(self.list_file.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise OSError(f"{self.list_file} cannot be read ({e}); move it aside and run `llmgw mirror import "
                          f"{self.files_dir}` to list the files again") from None
        for row in doc.get("held", []):
            held = Held(**row)
            self.held[str(held.key)] = held
        for row in doc.get("wanted", []):
            wanted = Wanted(**row)
            self.wanted[str(wanted.key)] = wanted
        self.removed = {str(k): float(v) for k, v in doc.get("removed", {}).items()}

    def save(self) -> None:
        self.write(self.snapshot())

    def snapshot(self) -> tuple[int, bytes]:
        """The list as it is now, numbered, to write (`write`, in a thread): taken on the loop, which alone changes
        it, so a write in a thread never reads a dict while another fetch's end adds to it."""
        self._taken += 1
        cutoff = self.clock() - REMOVED_KEPT_S
        self.removed = {k: t for k, t in self.removed.items() if t >= cutoff}
        doc = {"held": [asdict(h) for h in sorted(self.held.values(), key=lambda h: str(h.key))],
               "wanted": [asdict(w) for w in sorted(self.wanted.values(), key=lambda w: str(w.key))],
               "removed": dict(sorted(self.removed.items()))}
        return self._taken, json.dumps(doc, indent=1).encode()

    def write(self, snapshot: tuple[int, bytes]) -> None:
        """Write a snapshot, one writer at a time (they share the temporary file), and never over a newer one:
        two fetches that end together write from two threads, in either order (CI: the second rename found the
        temporary file gone)."""
        number, data = snapshot
        with self._writing:
            if number <= self._written:
                return
            write_atomic(self.list_file, data, 0o640)
            self._written = number

    def path_of(self, key: FileKey) -> Path:
        """Where the file of `key` is kept; FileKey has refused any name that would step outside files/."""
        return self.files_dir / key.repo / key.commit / key.path

    def get(self, key: FileKey) -> Held | None:
        return self.held.get(str(key))

    def add(self, held: Held) -> None:
        """List a file whose bytes are in place and checked."""
        held.added_at = held.added_at or self.clock()
        self.held[str(held.key)] = held
        self.removed.pop(str(held.key), None)

    def remove(self, key: FileKey, when: float | None = None) -> bool:
        """Delete a file and remember its removal; whether it was here."""
        name = str(key)
        was = self.held.pop(name, None) is not None
        path = self.path_of(key)
        path.unlink(missing_ok=True)
        _prune_empty(path.parent, self.files_dir)
        self.removed[name] = max(self.removed.get(name, 0.0), when if when is not None else self.clock())
        self.wanted.pop(name, None)
        return was

    def users(self, key: FileKey) -> list[str]:
        """The catalog's models that use the file, as the control planes last said."""
        wanted = self.wanted.get(str(key))
        return list(wanted.models) if wanted else []

    def set_wanted(self, wanted: list[Wanted]) -> None:
        """What the control planes want now, replacing what they wanted before."""
        self.wanted = {str(w.key): w for w in wanted}

    def missing(self) -> list[Wanted]:
        """What is wanted and not held, nor removed since it was asked for."""
        return [w for name, w in self.wanted.items() if name not in self.held]

    def used_bytes(self) -> int:
        return sum(h.size for h in self.held.values())


def _prune_empty(folder: Path, top: Path) -> None:
    """Remove the folders a removal left empty, up to (not including) `top`."""
    while folder != top and top in folder.parents:
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = folder.parent
