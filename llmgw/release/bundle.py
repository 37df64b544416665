"""The offline bundle: one tar file with the program, the engine wheels a node installs, and their sha256s.

A site with no registry reachable carries this one file in: `llmgw upgrade
--from-bundle FILE` checks and holds the program from it, and keeps its
wheels where the agents' llama.cpp install takes them (DATA/wheels/, served
to the nodes over the mTLS port) instead of asking PyPI.

    llmgw-VERSION-bundle.tar
      bundle.json      {"version", "built_for", "wheels": [names]}
      SHA256SUMS       "<sha256>  <name>" per file, as sha256sum writes it
      llmgw.pyz
      wheels/xllamacpp-….whl

`python3 build.py dist --bundle` makes it.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.release.program import ReleaseError, sha256_of

BUNDLE_SUFFIX = "-bundle.tar"
SUMS = "SHA256SUMS"
MANIFEST = "bundle.json"
PROGRAM = "llmgw.pyz"


@dataclass
class Bundle:
    version: str
    program: Path
    wheels: list[Path] = field(default_factory=list)


def _safe(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts and (
        name in (SUMS, MANIFEST, PROGRAM) or (len(parts) == 2 and parts[0] == "wheels" and name.endswith(".whl")))


def open_bundle(path: str | os.PathLike[str], into: str | os.PathLike[str]) -> Bundle:
    """Unpack the bundle at `path` into the folder `into`, every file checked against SHA256SUMS, or ReleaseError."""
    path, into = Path(path), Path(into)
    try:
        with tarfile.open(path, "r:") as tar:
            members = tar.getmembers()
            strange = [m.name for m in members if not (m.isfile() and _safe(m.name))]
            if strange:
                raise ReleaseError(f"{path} holds {strange[0]!r}, which no llmgw bundle holds; make the bundle "
                                   "again with `python3 build.py dist --bundle`")
            into.mkdir(parents=True, exist_ok=True)
            for member in members:
                source = tar.extractfile(member)
                assert source is not None  # a regular file, checked above
                target = into / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with source, open(target, "wb") as out:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
    except (tarfile.TarError, OSError) as e:
        if isinstance(e, ReleaseError):
            raise
        raise ReleaseError(f"{path} is not an llmgw bundle (a tar file) that can be read: {e}; make it again "
                           "with `python3 build.py dist --bundle`") from None
    try:
        manifest = json.loads((into / MANIFEST).read_text())
        # sha256sum marks a file read in binary mode with "*" before its name.
        sums = {name.strip().lstrip("*"): digest for digest, name in
                (line.split(None, 1) for line in (into / SUMS).read_text().splitlines() if line.strip())}
    except (OSError, ValueError):
        raise ReleaseError(f"{path} has no readable {MANIFEST} and {SUMS}; make the bundle again with "
                           "`python3 build.py dist --bundle`") from None
    listed = [PROGRAM] + [f"wheels/{name}" for name in manifest.get("wheels", [])]
    for name in listed:
        if name not in sums:
            raise ReleaseError(f"{path}'s {SUMS} does not list {name}; make the bundle again")
        if not (into / name).is_file() or sha256_of(into / name) != sums[name]:
            raise ReleaseError(f"{name} in {path} does not match its sha256 in {SUMS}: the bundle was damaged "
                               "on its way; copy it again")
    return Bundle(str(manifest.get("version", "")), into / PROGRAM, [into / n for n in listed[1:]])
