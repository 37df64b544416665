"""One dist/llmgw.pyz runs on CPython 3.11, 3.12 and 3.13 (issue 11, item 11).

A newcomer built the archive with the checkout's Python 3.11 and copied it to
a machine with 3.12: it refused, since its compiled dependencies (orjson,
uvloop, asyncpg, …) were built for 3.11 alone. The archive now carries the
pure-Python dependencies once and the compiled ones once per version, and
picks its own at start.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.support.pgcluster import free_port
from tests.support.pyz import built_pyz

ROOT = Path(__file__).resolve().parents[2]


def load_build():
    spec = importlib.util.spec_from_file_location("build_for_pyz", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`python3 build.py dist` with its default versions: the suite's own archive (tests/support/pyz.py), which
    every test that runs the program shares, built once."""
    started = time.monotonic()
    pyz = built_pyz(tmp_path_factory)
    print(f"\ndist: {pyz.stat().st_size / 1e6:.1f} MB, built (or found built) in {time.monotonic() - started:.0f} s")
    return load_build(), pyz


def bare(python: str, pyz: Path, *args: str, home: str, **kwargs):
    """The archive under python, as on a machine with nothing else installed."""
    return subprocess.Popen([python, "-I", "-S", str(pyz), *args], env={"PATH": "/usr/bin:/bin", "HOME": home},
                            cwd=home, **kwargs)


def ask_sim(port: int) -> dict:
    body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hello"}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_archive_answers_a_chat_under_every_carried_python_found_here(built):
    build, pyz = built
    with zipfile.ZipFile(pyz) as zf:
        carried = json.loads(zf.read("pyz-built-for.json"))["pythons"]
        tops = {name.split("/")[0] for name in zf.namelist()}
    assert carried == ["3.11", "3.12", "3.13"]
    assert {"lib", "lib-each", "lib-cp311", "lib-cp312", "lib-cp313"} <= tops

    tried, not_here = [], []
    for version in carried:
        python = build.find_python(version)
        if python is None:
            not_here.append(version)
            continue
        with tempfile.TemporaryDirectory(prefix="llmgw-pyz-test-") as home:
            shown = bare(python, pyz, "--version", home=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
            assert shown.communicate(timeout=120)[0].strip() == "llmgw 0.1.0"
            # A real engine from the archive: aiohttp's, orjson's and uvloop's
            # compiled modules for this version loaded and answering.
            port = free_port()
            log = Path(home) / "sim.log"
            with open(log, "wb") as out:
                sim = bare(python, pyz, "sim-engine", "--port", str(port), "--model", "sim", home=home,
                           stdout=out, stderr=subprocess.STDOUT)
                try:
                    deadline = time.monotonic() + 60
                    while True:
                        try:
                            answer = ask_sim(port)
                            break
                        except OSError:
                            assert sim.poll() is None and time.monotonic() < deadline, log.read_text()
                            time.sleep(0.1)
                finally:
                    sim.terminate()
                    sim.wait(timeout=10)
            assert answer["choices"][0]["message"]["content"]
            tried.append(f"{version} ({python})")
    print(f"ran under CPython {', '.join(tried)}; not found here: {', '.join(not_here) or 'none'}")
    assert tried, f"no CPython {', '.join(carried)} on this machine to run the archive with"


def test_a_python_the_archive_does_not_carry_is_refused_naming_those_it_does_and_how_to_build_one(tmp_path):
    # The real bootstrap, in an archive that carries only a version no machine has.
    pyz = tmp_path / "llmgw.pyz"
    with zipfile.ZipFile(pyz, "w") as zf:
        zf.write(ROOT / "packaging" / "pyz_main.py", "__main__.py")
        zf.writestr("pyz-built-for.json", json.dumps({
            "pythons": ["3.98", "3.99"], "implementation": sys.implementation.name,
            "machine": platform.machine(), "system": platform.system(),
        }))
        zf.writestr("lib-cp399/marker.txt", "")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    result = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--version"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert f"carries the compiled modules for CPython 3.98, 3.99, not for {here}" in message
    assert f"`python3 build.py dist --python {here}`" in message
    assert "Traceback" not in message
    assert not (tmp_path / ".cache").exists(), "nothing is unpacked for a version that is refused"


def test_dist_refuses_a_python_version_it_cannot_build_for_before_it_installs_anything():
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "dist", "--python", "2.7"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "build: dist --python wants a CPython version 3.11 or newer, like 3.12 (got '2.7')"
    assert "installing" not in result.stdout


def test_dist_python_is_repeatable_and_defaults_to_3_11_3_12_and_3_13():
    build = load_build()
    assert build.dist_pythons([]) == ["3.11", "3.12", "3.13"]
    assert build.dist_pythons(["--python", "3.13", "--python=3.12", "--python", "3.12"]) == ["3.12", "3.13"]


def test_a_dependency_another_version_needs_is_found_missing_though_pip_judged_it_for_the_python_running_it(tmp_path):
    # pip --python-version 3.13, run by 3.11, installed typing_extensions
    # (`python_version < "3.13"`): it judges markers for itself. Built the other
    # way round, 3.11's set would lack it; dist adds what the markers ask for.
    build = load_build()
    info = tmp_path / "multidict-7.2.1.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(
        "Metadata-Version: 2.1\nName: multidict\nVersion: 7.2.1\n"
        'Requires-Dist: typing-extensions>=4.1.0; python_version < "3.13"\n'
        'Requires-Dist: async-timeout>=4; python_version < "3.11"\n'
    )

    def missing(version: str) -> list[str]:
        result = subprocess.run([sys.executable, "-c", build.MISSING_FOR_VERSION, str(tmp_path), version],
                                capture_output=True, text=True, check=True)
        return json.loads(result.stdout)

    assert missing("3.12") == ["typing-extensions>=4.1.0"]
    assert missing("3.13") == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_archive_carries_the_manual_inside_the_package_where_the_console_reads_it(built):
    _, pyz = built

    names = set(zipfile.ZipFile(pyz).namelist())

    # llmgw/console/manual.py reads llmgw/manual/*.md beside the package before a checkout's docs/.
    assert {"lib/llmgw/manual/console.md", "lib/llmgw/manual/sign-in.md", "lib/llmgw/console/manual.py"} <= names
    assert {f"lib/llmgw/manual/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= names
