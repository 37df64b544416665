"""`python3 build.py check` warns on a long commit subject not yet pushed (issue 26, Habits).

Each test makes a git repository of its own and points build.py's ROOT at
it: the range looked at is `@{upstream}..HEAD` where the branch tracks one,
else `origin/main..HEAD`, else nothing is said.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LONG = ("Tests: one usage_rows in tests/support, first-key servers shared, and the fixtures that "
        "start a control plane read it")
SHORT = "Tests: one usage_rows in tests/support"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """An empty repository on `main`, with this machine's git configuration kept out, and build.py set on it."""
    for name in ("GIT_AUTHOR", "GIT_COMMITTER"):
        monkeypatch.setenv(f"{name}_NAME", "Test")
        monkeypatch.setenv(f"{name}_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    git(tmp_path, "init", "-q", "-b", "main")
    spec = importlib.util.spec_from_file_location("build_for_subjects", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    monkeypatch.setattr(build, "ROOT", tmp_path)
    return tmp_path, build


def git(where: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=where, check=True, capture_output=True, text=True).stdout.strip()


def commit(where: Path, subject: str) -> str:
    git(where, "commit", "-q", "--allow-empty", "-m", subject, "-m", "The why, in the body.")
    return git(where, "rev-parse", "--short", "HEAD")


def test_a_long_subject_not_yet_on_the_upstream_is_warned_of_and_one_already_there_is_not(repo, capfd):
    root, build = repo
    commit(root, LONG)  # already on the upstream: shared, too late to reword
    git(root, "branch", "shared")
    git(root, "checkout", "-q", "-b", "work")
    git(root, "branch", "-q", "--set-upstream-to=shared")
    commit(root, SHORT)
    late = commit(root, LONG + " again")

    where, found = build.long_subjects()
    assert where == "@{upstream}..HEAD"
    assert found == [(late, LONG + " again")]

    build.warn_long_subjects()
    out = capfd.readouterr().out
    assert f"build: subjects: warning: {late}'s subject is {len(LONG) + 6} characters, over 72: {LONG} again" in out
    assert out.count("warning:") == 1
    assert "git rebase -i" in out


def test_without_an_upstream_the_commits_past_origin_main_are_read(repo, capfd):
    root, build = repo
    base = commit(root, SHORT)
    git(root, "update-ref", "refs/remotes/origin/main", base)
    late = commit(root, LONG)

    assert build.long_subjects() == ("origin/main..HEAD", [(late, LONG)])
    build.warn_long_subjects()
    assert f"{late}'s subject is {len(LONG)} characters" in capfd.readouterr().out


def test_subjects_of_72_characters_or_fewer_pass_without_a_word(repo, capfd):
    root, build = repo
    base = commit(root, SHORT)
    git(root, "update-ref", "refs/remotes/origin/main", base)
    commit(root, "x" * 72)

    assert build.long_subjects() == ("origin/main..HEAD", [])
    build.warn_long_subjects()
    assert capfd.readouterr().out == ""


def test_with_neither_an_upstream_nor_origin_main_nothing_is_said(repo, capfd):
    root, build = repo
    commit(root, LONG)

    assert build.long_subjects() == (None, [])
    build.warn_long_subjects()
    assert capfd.readouterr().out == ""


def test_outside_a_git_checkout_nothing_is_said(tmp_path, monkeypatch, capfd):
    spec = importlib.util.spec_from_file_location("build_for_subjects", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))

    build.warn_long_subjects()
    assert capfd.readouterr().out == ""
