"""dist/llmgw.pyz for tests: built once for the running Python, and copies made different on purpose.

Building the archive takes a minute or more (pip fetches the wheels), so it
is built once per content of the checkout (llmgw/, packaging/, systemd/,
build.py, setup.cfg) into a cache beside pytest's own temporary folders, and
shared by every test and session that asks for the same content; a lock
keeps two sessions from building the same one at once.

    pyz = built_pyz(tmp_path_factory)            # or the `pyz` fixture
    newer = with_version(pyz, "0.2.0", tmp / "new.pyz")
    bad = broken(pyz, tmp / "bad.pyz")            # --version works, server/agent fail at start
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHEBANG = b"#!/usr/bin/env python3\n"
BROKEN_SENTENCE = "this build is broken on purpose, by a test"


def _inputs_digest() -> str:
    digest = hashlib.sha256(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    files = [ROOT / "build.py", ROOT / "setup.cfg"]
    for folder in ("llmgw", "packaging", "systemd"):
        files += sorted(p for p in (ROOT / folder).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".mo"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build(work: Path) -> Path:
    spec = importlib.util.spec_from_file_location("build_for_tests_pyz", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.BUILD = work / "build"
    build.DIST = work / "dist"
    # The environment running the tests (a worktree may borrow another checkout's .venv).
    build.VENV = Path(sys.prefix)
    build.VENV_PYTHON = Path(sys.prefix) / "bin" / "python"
    # The tests run in .venv already; making it again is not what is wanted.
    build.ensure_venv = lambda *a, **k: None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert build.cmd_dist(["--python", version]) == 0
    return build.DIST / "llmgw.pyz"


def built_pyz(tmp_path_factory) -> Path:
    """The checkout's llmgw.pyz for this Python, built now or found built for the same content."""
    cache = tmp_path_factory.getbasetemp().parent / "llmgw-pyz-cache" / _inputs_digest()
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / "llmgw.pyz"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            made = _build(cache / "work")
            os.replace(made, done)
    return done


@pytest.fixture(scope="session")
def pyz(tmp_path_factory) -> Path:
    return built_pyz(tmp_path_factory)


def _rewrite(pyz: Path, dest: Path, changes: dict[str, bytes]) -> Path:
    """A copy of `pyz` at `dest` (mode 0755) with the zip entries in `changes` replaced."""
    out = io.BytesIO()
    out.write(SHEBANG)
    with zipfile.ZipFile(pyz) as old, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as new:
        missing = set(changes) - set(old.namelist())
        assert not missing, f"{pyz} has no {', '.join(sorted(missing))}"
        for info in old.infolist():
            new.writestr(info, changes.get(info.filename, old.read(info.filename)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(out.getvalue())
    dest.chmod(0o755)
    return dest


def _read(pyz: Path, name: str) -> str:
    with zipfile.ZipFile(pyz) as zf:
        return zf.read(name).decode()


def with_version(pyz: Path, version: str, dest: Path) -> Path:
    """A copy of `pyz` whose llmgw.__version__ (and so `llmgw --version`) is `version`."""
    text = _read(pyz, "lib/llmgw/__init__.py")
    changed, count = re.subn(r'^__version__ = "[^"]*"$', f'__version__ = "{version}"', text, flags=re.M)
    assert count == 1, "lib/llmgw/__init__.py no longer sets __version__ on a line of its own"
    return _rewrite(pyz, dest, {"lib/llmgw/__init__.py": changed.encode()})


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
    return _rewrite(source, dest, {"lib/llmgw/cli/main.py": main.replace(anchor, failing).encode()})
