"""A node that reaches no registry installs llama.cpp's server from the wheel in DATA/wheels (the offline bundle's)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys

import pytest

from llmgw.engines.llamacpp_install import XLLAMACPP_VERSION, installed_llama_server, offline_wheel, wheels_dir


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The pinned xllamacpp wheel, fetched once as `build.py dist --bundle` fetches it."""
    folder = tmp_path_factory.mktemp("bundle-wheels")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                           "--only-binary", ":all:", "-d", str(folder), f"xllamacpp=={XLLAMACPP_VERSION}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return next(folder.glob("xllamacpp-*.whl"))


def test_with_the_wheel_in_data_wheels_the_install_asks_no_registry(wheel, tmp_path, monkeypatch):
    data = tmp_path / "data"
    wheels_dir(data).mkdir(parents=True)
    shutil.copy(wheel, wheels_dir(data) / wheel.name)
    assert offline_wheel(data) == wheels_dir(data) / wheel.name
    # Every registry pip could be pointed at is one that does not answer: the install must not need it.
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.setenv(name, "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    said: list[str] = []
    server = asyncio.run(installed_llama_server(data, progress=said.append))
    assert server.version == f"xllamacpp {XLLAMACPP_VERSION}"
    assert any(f"from {wheels_dir(data)}, asking no registry" in line for line in said), said


def test_without_a_wheel_there_is_none_to_take(tmp_path):
    assert offline_wheel(tmp_path) is None
