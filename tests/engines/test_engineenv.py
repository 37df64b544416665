"""A Python engine's pinned release, installed by the agent into an environment of its own (engines/engineenv.py).

The engine here is a wheel the test writes, installed with the agent's own pip from the node's DATA/wheels
(`--no-index`), so nothing is asked of a registry; vLLM itself goes the same way in
tests/integration/test_vllm_cpu.py.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from llmgw.engines.engineenv import EngineUnavailable, PythonEngine, engine_env, ensure_engine_env, installed_env


def wheel(folder: Path, name: str, version: str, module: str, source: str, requires: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{module}/__init__.py", source)
        zf.writestr(f"{dist}.dist-info/METADATA", metadata)
        zf.writestr(f"{dist}.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


ENGINE = PythonEngine("fake-engine", "1.0", "fakeengine", remove=("fake-addon",))


def python_of(env: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(env / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True, timeout=60)


async def test_an_engine_is_installed_from_the_nodes_wheels_once_and_what_it_must_not_carry_is_taken_out(tmp_path):
    data = tmp_path / "data"
    wheel(data / "wheels", "fake-engine", "1.0", "fakeengine", '__version__ = "1.0"\n', requires=("fake-addon",))
    wheel(data / "wheels", "fake-addon", "3.0", "fakeaddon", "")
    said: list[str] = []

    env = await ensure_engine_env(data, ENGINE, wheels=data / "wheels", progress=said.append)

    assert env == engine_env(data, ENGINE) == data / "engines" / "fake-engine-1.0"
    assert installed_env(data, ENGINE) == env
    assert python_of(env, "import fakeengine; print(fakeengine.__version__)").stdout.strip() == "1.0"
    assert python_of(env, "import fakeaddon").returncode != 0, "what the spec removes is gone"
    assert said[0].startswith(f"installing fake-engine==1.0 (from {data / 'wheels'}, asking no registry)")
    assert json.loads((env / "installed.json").read_text())["fake-engine"] == "1.0"
    said.clear()
    assert await ensure_engine_env(data, ENGINE, wheels=data / "wheels", progress=said.append) == env
    assert said == [], "found installed: nothing is installed again"


async def test_a_release_that_says_another_version_is_refused_and_leaves_nothing_behind(tmp_path):
    data = tmp_path / "data"
    wheel(data / "wheels", "fake-engine", "1.0", "fakeengine", '__version__ = "2.0"\n')
    engine = PythonEngine("fake-engine", "1.0", "fakeengine")

    with pytest.raises(EngineUnavailable) as refused:
        await ensure_engine_env(data, engine, wheels=data / "wheels")

    assert str(refused.value) == "pip installed fakeengine '2.0', not 1.0"
    assert installed_env(data, engine) is None
    assert sorted(p.name for p in (data / "engines").iterdir()) == ["fake-engine-1.0.lock"], "no half environment"


async def test_an_engine_pip_cannot_find_says_so_with_pips_own_words(tmp_path):
    data = tmp_path / "data"
    (data / "wheels").mkdir(parents=True)
    wheel(data / "wheels", "fake-engine", "1.0", "fakeengine", '__version__ = "1.0"\n', requires=("not-there",))

    with pytest.raises(EngineUnavailable) as refused:
        await ensure_engine_env(data, PythonEngine("fake-engine", "1.0", "fakeengine"), wheels=data / "wheels")

    said = str(refused.value)
    assert said.startswith("pip could not install fake-engine==1.0 (exit 1): ") and "not-there" in said
