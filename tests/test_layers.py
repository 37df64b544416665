"""`python3 build.py check` holds the layers (issue 12, item 2).

Each test runs build.py's own check over a copy of the tree, with
import-linter from the venv running the tests, so what is tested is what CI
runs: the contracts in .importlinter, over the package as Python finds it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
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
    every_step = build.check_steps
    monkeypatch.setattr(build, "check_steps",
                        lambda: [step for step in every_step() if step.name in ("layers", "faces")])
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


def faces_figure(build) -> int:
    """How many imports reach past a face in the tree, as the faces step counts them."""
    done = subprocess.run([sys.executable, "-c", build.FACES_SCRIPT, str(10**6)], cwd=build.ROOT,
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def test_an_import_past_a_face_over_the_most_allowed_fails_the_check_saying_what_to_do(tree, capfd, monkeypatch):
    root, build = tree
    figure = faces_figure(build)
    monkeypatch.setattr(build, "FACES_MOST", figure)  # the tree as it is, with room for none more
    add_import(root, "llmgw.cli.keys", "from llmgw.control.adminclient import AdminClient  # past control's face")
    assert build.cmd_check([]) == 1
    out = capfd.readouterr().out
    assert f"{figure + 1} of " in out
    assert f"at most {figure} may" in out
    assert "1 more than build.py's FACES_MOST allows: import the name from the package" in out
    assert "build: faces: FAILED" in out
    assert "build: check failed: faces" in out


def test_the_same_name_from_the_face_is_not_counted(tree, capfd, monkeypatch):
    root, build = tree
    figure = faces_figure(build)
    monkeypatch.setattr(build, "FACES_MOST", figure)
    add_import(root, "llmgw.cli.keys", "from llmgw.control import AdminClient  # control's face")
    assert build.cmd_check([]) == 0
    assert f"{figure} of " in capfd.readouterr().out


def test_a_figure_under_the_most_allowed_passes_and_asks_for_the_most_to_be_lowered(tree, capfd, monkeypatch):
    root, build = tree
    figure = faces_figure(build)
    monkeypatch.setattr(build, "FACES_MOST", figure + 3)
    assert build.cmd_check([]) == 0
    assert f"lower it to {figure} in build.py" in capfd.readouterr().out


def test_check_refuses_arguments_naming_what_it_runs(tree, capsys):
    _, build = tree
    with pytest.raises(SystemExit) as exit_:
        build.cmd_check(["layers"])
    assert exit_.value.code == 2
    assert "check takes no arguments (got layers); it runs every check: layers, faces" in capsys.readouterr().err
