"""The dependencies' wheels that `build.py dist` installs for each Python, kept for the next build (build.py,
installed_for): the suite's archive is built in every run, and pip for three Pythons was 74 s of its 110 s."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_build():
    spec = importlib.util.spec_from_file_location("build_for_dist_wheels", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.VENV_PYTHON = Path(sys.prefix) / "bin" / "python"  # the environment running the tests
    return module


def test_a_versions_wheels_are_installed_once_then_read_where_they_are_kept_until_a_pin_changes(tmp_path):
    build = load_build()
    tags = build.this_platform()["tags"]
    requirements, constraints = tmp_path / "requirements.txt", tmp_path / "constraints.txt"
    requirements.write_text("idna\n")
    constraints.write_text(f"idna=={importlib.metadata.version('idna')}\n")
    cache = tmp_path / "cache"

    first = build.installed_for("3.12", tmp_path / "one", tags, requirements, constraints, cache)
    assert first == tmp_path / "one" and (first / "idna" / "__init__.py").is_file()
    [kept] = cache.glob("cp312-*")
    assert (kept / "idna" / "__init__.py").read_bytes() == (first / "idna" / "__init__.py").read_bytes()

    # The same pins: nothing installed, nothing copied; the build reads the kept folder.
    again = build.installed_for("3.12", tmp_path / "two", tags, requirements, constraints, cache)
    assert again == kept and not (tmp_path / "two").exists()

    # Another version, or another pin, is another set.
    other = build.installed_for("3.13", tmp_path / "three", tags, requirements, constraints, cache)
    assert other == tmp_path / "three" and len(list(cache.glob("cp313-*"))) == 1
    constraints.write_text("idna==3.7\n")
    changed = build.installed_for("3.12", tmp_path / "four", tags, requirements, constraints, cache)
    assert changed == tmp_path / "four" and len(list(cache.glob("cp312-*"))) == 2
    assert "3.7" in next((changed).glob("idna-*.dist-info")).name
