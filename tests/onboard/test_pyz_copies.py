"""tests/support/pyz.py's copies of the archive: another version, and a build broken on purpose."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmgw import __version__
from tests.support.pyz import BROKEN_SENTENCE, broken, pyz, with_version  # noqa: F401 - pyz is a fixture

pytestmark = pytest.mark.slow  # builds llmgw.pyz


def run(program: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/python3", "-I", str(program), *args], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                                            "LLMGW_PYZ_CACHE": str(home / "cache")})


def test_a_copy_with_another_version_says_that_version_and_the_original_its_own(pyz, tmp_path):
    newer = with_version(pyz, "9.8.7", tmp_path / "newer.pyz")
    assert run(newer, "--version", home=tmp_path).stdout.strip() == "llmgw 9.8.7"
    assert run(pyz, "--version", home=tmp_path).stdout.strip() == f"llmgw {__version__}"


def test_a_broken_copy_says_its_version_and_fails_to_start_a_server_or_an_agent(pyz, tmp_path):
    bad = broken(pyz, tmp_path / "bad.pyz", version="9.9.9")
    assert run(bad, "--version", home=tmp_path).stdout.strip() == "llmgw 9.9.9"
    for command in ("server", "agent"):
        done = run(bad, command, home=tmp_path)
        assert (done.returncode, done.stderr.strip()) == (1, f"llmgw: {BROKEN_SENTENCE}")


def _unpacked(cache: Path) -> list[Path]:
    """The archive's unpacked directories in `cache`, oldest first."""
    return sorted(cache.glob("pyz-*"), key=lambda p: p.stat().st_mtime)


def test_a_new_version_links_the_files_it_shares_with_the_version_unpacked_before(pyz, tmp_path):
    newer = with_version(pyz, "9.8.7", tmp_path / "newer.pyz")
    assert run(pyz, "--version", home=tmp_path).stdout.strip() == f"llmgw {__version__}"
    assert run(newer, "--version", home=tmp_path).stdout.strip() == "llmgw 9.8.7"
    old, new = _unpacked(tmp_path / "cache")
    shared, changed = Path("lib/jinja2/__init__.py"), Path("lib/llmgw/__init__.py")
    assert (old / shared).stat().st_ino == (new / shared).stat().st_ino
    assert (old / changed).stat().st_ino != (new / changed).stat().st_ino
    assert '__version__ = "9.8.7"' in (new / changed).read_text()
    assert f'__version__ = "{__version__}"' in (old / changed).read_text()
    files = [p for p in new.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.name != ".contents.json"]
    assert sum(p.stat().st_nlink > 1 for p in files) == len(files) - 1  # all but the one file that changed


def test_a_version_unpacked_without_a_list_of_its_files_is_not_linked_from(pyz, tmp_path):
    # As a directory unpacked by an earlier bootstrap, which wrote no list: the new version unpacks everything.
    newer = with_version(pyz, "9.8.6", tmp_path / "newer.pyz")
    assert run(pyz, "--version", home=tmp_path).returncode == 0
    (old,) = _unpacked(tmp_path / "cache")
    (old / ".contents.json").unlink()
    assert run(newer, "--version", home=tmp_path).stdout.strip() == "llmgw 9.8.6"
    new = next(p for p in _unpacked(tmp_path / "cache") if p != old)
    assert (new / "lib/jinja2/__init__.py").stat().st_nlink == 1
