"""dist/llmgw.pyz for tests: built once, as `python3 build.py dist` makes it, and copies made different on purpose.

Building the archive takes a minute or more (the dependencies' wheels for
three Pythons, installed once a machine: wheels_cache()), so it is built once
per content of the checkout (llmgw/, packaging/, systemd/,
build.py, setup.cfg) into a cache beside pytest's own temporary folders, and
shared by every test and session that asks for the same content; a lock
keeps two sessions from building the same one at once.

It is the archive a release is: for every Python dist carries (3.11, 3.12
and 3.13). tests/integration/test_pyz.py checks it under each, and every
other test runs it under this one. The two were built apart, one for this
Python alone, 63 s and 86 s of a 715 s run (issue 26's quiet CI of
e4e2401); the one build of all three costs the second alone.

    pyz = built_pyz(tmp_path_factory)            # or the `pyz` fixture
    newer = with_version(pyz, "0.2.0", tmp / "new.pyz")
    bad = broken(pyz, tmp / "bad.pyz")            # --version works, server/agent fail at start
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import struct
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHEBANG = b"#!/usr/bin/env python3\n"
BROKEN_SENTENCE = "this build is broken on purpose, by a test"


def _inputs_digest() -> str:
    digest = hashlib.sha256(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    files = [ROOT / "build.py", ROOT / "setup.cfg"]
    # Left out: what a running llmgw writes into the checkout as it goes, and so what another worker's server
    # may be writing at this moment (the portal compiles its catalogues: llmgw.mo, through llmgw.mo.partial,
    # which a run of 2026-12-07 listed here and found gone when it came to read it).
    for folder in ("llmgw", "packaging", "systemd"):
        files += sorted(p for p in (ROOT / folder).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts
                        and p.suffix not in (".pyc", ".mo", ".partial"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build(work: Path, wheels: Path) -> Path:
    spec = importlib.util.spec_from_file_location("build_for_tests_pyz", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.BUILD = work / "build"
    build.DIST = work / "dist"
    build.WHEELS_CACHE = wheels
    # The environment running the tests (a worktree may borrow another checkout's .venv).
    build.VENV = Path(sys.prefix)
    build.VENV_PYTHON = Path(sys.prefix) / "bin" / "python"
    # The tests run in .venv already; making it again is not what is wanted.
    build.ensure_venv = lambda *a, **k: None
    assert build.cmd_dist([]) == 0  # every version dist carries by default, as a release is built
    return build.DIST / "llmgw.pyz"


def prune(folder: Path, days: float = 2) -> Path:
    """`folder`, its entries untouched for `days` removed (another run's, still in use, are newer)."""
    cutoff = time.time() - days * 86400
    for entry in folder.glob("*") if folder.is_dir() else ():
        try:
            if entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue  # removed by another worker meanwhile
    return folder


def built_pyz(tmp_path_factory) -> Path:
    """The checkout's llmgw.pyz, built now or found built for the same content."""
    # The session's own folder: under xdist each worker's basetemp is a folder of the controller's, which
    # starts the build early (tests/support/schedule.py) into the same place.
    return build_at(tmp_path_factory.getbasetemp().parent)


def wheels_cache() -> Path:
    """Where the dependencies' wheels installed for each Python are kept between runs of the suite, as pip keeps
    its downloads: ~/.cache/llmgw/dist-wheels (XDG_CACHE_HOME's where set).

    They are the same files for as long as the pins are (build.py, installed_for, keys each set by them), and
    installing them was 74 s of the archive's 110 s build in every run (three Pythons' pip, on a loaded core;
    2026-12-07), while the suite's cores had no time to spare. Kept in the run's own folder, each fresh run
    paid it again; kept here, the first run on a machine does, and a set no build used for a week goes.
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return prune(base / "llmgw" / "dist-wheels", days=7)


def build_at(root: Path) -> Path:
    """The archive in ROOT/llmgw-pyz-cache, built unless a build for the same content is there; the
    dependencies' wheels kept in wheels_cache() for the next build."""
    builds = root / "llmgw-pyz-cache"
    cache = builds / _inputs_digest()
    cache.mkdir(parents=True, exist_ok=True)
    # One build for each content the suite ran on, 100-300 MB each: those no run used for two days go.
    os.utime(cache)
    prune(builds)
    done = cache / "llmgw.pyz"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            made = _build(cache / "work", wheels_cache())
            os.replace(made, done)
    return done


def uses_pyz(source: str) -> bool:
    """Whether a test module's source runs the archive: it imports the `pyz` fixture or `built_pyz`."""
    if "tests.support.pyz" not in source:
        return False  # most of the suite's 500 modules, without parsing them
    return any(isinstance(node, ast.ImportFrom) and node.module == "tests.support.pyz"
               and {alias.name for alias in node.names} & {"pyz", "built_pyz"}
               for node in ast.walk(ast.parse(source)))


@pytest.fixture(scope="session")
def pyz(tmp_path_factory) -> Path:
    return built_pyz(tmp_path_factory)


def rewrite(pyz: Path, dest: Path, changes: dict[str, bytes]) -> Path:
    """A copy of `pyz` at `dest` (mode 0755) with the zip entries in `changes` replaced.

    The entries not changed are copied as they are stored, compressed: the
    archive holds some 120 MB of modules, and inflating and deflating them all
    again cost 5 s of CPU a copy, some 120 s over a run of the suite.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")  # `pyz` may be `dest` itself (broken() of a new version)
    with zipfile.ZipFile(pyz) as old, open(pyz, "rb") as raw, open(partial, "wb") as out:
        missing = set(changes) - set(old.namelist())
        assert not missing, f"{pyz} has no {', '.join(sorted(missing))}"
        out.write(SHEBANG)
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as new:
            for info in old.infolist():
                if info.filename in changes:
                    new.writestr(info, changes[info.filename])
                else:
                    _copy_stored(raw, info, new)
    partial.chmod(0o755)
    os.replace(partial, dest)
    return dest


def _copy_stored(raw, info: zipfile.ZipInfo, new: zipfile.ZipFile) -> None:
    """Append one entry to `new` as `raw` stores it: its local header, then its compressed bytes unread."""
    # The local header: 30 bytes, then the name and an extra field whose lengths are its last two fields.
    # ZipFile has already added the shebang's length to header_offset: it is the file's own offset.
    raw.seek(info.header_offset)
    header = raw.read(30)
    assert header[:4] == b"PK\x03\x04", f"no local header for {info.filename}"
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    raw.seek(name_length + extra_length, os.SEEK_CUR)
    data = raw.read(info.compress_size)
    copied = zipfile.ZipInfo(info.filename, info.date_time)
    copied.compress_type, copied.external_attr = info.compress_type, info.external_attr
    copied.CRC, copied.compress_size, copied.file_size = info.CRC, info.compress_size, info.file_size
    copied.header_offset = new.fp.tell()  # type: ignore[union-attr] - as ZipFile.writestr sets it
    new.fp.write(copied.FileHeader())  # type: ignore[union-attr]
    new.fp.write(data)  # type: ignore[union-attr]
    new.start_dir = new.fp.tell()  # type: ignore[union-attr] - where close() writes the central directory
    new.filelist.append(copied)
    new.NameToInfo[copied.filename] = copied
    new._didModify = True  # type: ignore[attr-defined] - so that close() writes the central directory


def _read(pyz: Path, name: str) -> str:
    with zipfile.ZipFile(pyz) as zf:
        return zf.read(name).decode()


def with_version(pyz: Path, version: str, dest: Path) -> Path:
    """A copy of `pyz` whose llmgw.__version__ (and so `llmgw --version`) is `version`."""
    text = _read(pyz, "lib/llmgw/__init__.py")
    changed, count = re.subn(r'^__version__ = "[^"]*"$', f'__version__ = "{version}"', text, flags=re.M)
    assert count == 1, "lib/llmgw/__init__.py no longer sets __version__ on a line of its own"
    return rewrite(pyz, dest, {"lib/llmgw/__init__.py": changed.encode()})


def carrying(pyz: Path, pythons: list[str], dest: Path) -> Path:
    """A copy of `pyz` whose pyz-built-for.json says it carries `pythons` (its modules are unchanged)."""
    import json

    built_for = json.loads(_read(pyz, "pyz-built-for.json"))
    built_for["pythons"] = pythons
    return rewrite(pyz, dest, {"pyz-built-for.json": (json.dumps(built_for, sort_keys=True) + "\n").encode()})


def broken(pyz: Path, dest: Path, version: str | None = None) -> Path:
    """A copy of `pyz` whose `llmgw server` and `llmgw agent` exit 1 at start; `--version` still answers.

    The upgrade's deliberately broken build: it installs and says its
    version, and fails only where a health check would notice.
    """
    source = with_version(pyz, version, dest) if version else pyz
    main = _read(source, "lib/llmgw/cli/main.py")
    anchor = "    args = parser.parse_args(argv)\n"
    assert main.count(anchor) == 1, "llmgw/cli/main.py no longer parses its arguments in one place"
    failing = anchor + (f'    if args.command in ("server", "agent"):\n'
                        f'        print("llmgw: {BROKEN_SENTENCE}", file=sys.stderr)\n'
                        f'        return 1\n')
    return rewrite(source, dest, {"lib/llmgw/cli/main.py": main.replace(anchor, failing).encode()})


if __name__ == "__main__":
    # `python -m tests.support.pyz ROOT`: the build the parallel phase's controller starts before any worker
    # asks for it (tests/support/schedule.py).
    print(build_at(Path(sys.argv[1])), flush=True)
