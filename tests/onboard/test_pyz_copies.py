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
