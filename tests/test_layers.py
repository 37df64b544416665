"""`python3 build.py check` holds the layers (issue 12, item 2).

Each test runs build.py's own check over a copy of the tree, with
import-linter from the venv running the tests, so what is tested is what CI
runs: the contracts in .importlinter, over the package as Python finds it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of llmgw/ and .importlinter, and build.py set to check it with this venv's tools."""
    shutil.copytree(ROOT / "llmgw", tmp_path / "llmgw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    spec = importlib.util.spec_from_file_location("build_under_test", ROOT / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    venv = Path(sys.executable).parent.parent
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "VENV", venv)
    monkeypatch.setattr(build, "VENV_PYTHON", Path(sys.executable))
    monkeypatch.setattr(build, "ensure_venv", lambda extras: None)
    # Only the layers' steps: lint and types read ruff.toml and setup.cfg,
    # which this copy leaves out, and mypy over the tree takes minutes.
    steps = [step for step in build.check_steps() if step.name in ("layers", "faces")]
    monkeypatch.setattr(build, "check_steps", lambda: steps)
    # The copy, not the checkout the venv has installed, is the llmgw found.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path, build


def add_import(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_as_it_is_passes_the_check(tree, capfd):
    root, build = tree
    assert build.cmd_check([]) == 0
    out = capfd.readouterr().out
    assert "build: layers: passed" in out
    assert "reach past its face" in out
    assert "build: check passed" in out


def test_an_import_that_runs_back_up_a_floor_fails_the_check_naming_the_arrow(tree, capfd):
    root, build = tree
    add_import(root, "llmgw.config.types", "from llmgw.control import plane  # config reaching up to control")
    assert build.cmd_check([]) == 1
    out = capfd.readouterr().out
    assert "llmgw.config is not allowed to import llmgw.control" in out
    assert "llmgw.config.types -> llmgw.control.plane" in out
    assert "build: layers: FAILED" in out
    assert "build: check failed: layers" in out


def test_two_packages_on_one_floor_may_not_import_each_other(tree, capfd):
    root, build = tree
    add_import(root, "llmgw.agent.link", "from llmgw.control import token  # the node reaching into the control plane")
    assert build.cmd_check([]) == 1
    out = capfd.readouterr().out
    assert "llmgw.agent.link -> llmgw.control.token" in out


def test_check_refuses_arguments_naming_what_it_runs(tree, capsys):
    _, build = tree
    with pytest.raises(SystemExit) as exit_:
        build.cmd_check(["layers"])
    assert exit_.value.code == 2
    assert "check takes no arguments (got layers); it runs every check: layers, faces" in capsys.readouterr().err
