"""What `python3 build.py run` and `test` install into .venv (issue 11, item 3).

A newcomer's first `run` spent 2.5 minutes in silence installing 1.6 GB,
torch and pytest included, before its first answer. `run` installs the
runtime and the SDK of the line it prints; `test` adds the test tools and
the similar-question embedder, torch from its CPU index.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.pgcluster import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def build(tmp_path, monkeypatch):
    """build.py as a module, its .venv a folder of this test's whose python is the one running the tests.

    So ensure_venv finds a working venv and goes straight to deciding what
    to install; pip_install is replaced by each test.
    """
    spec = importlib.util.spec_from_file_location("build_under_test", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(module, "VENV", venv)
    monkeypatch.setattr(module, "VENV_PYTHON", venv / "bin" / "python")
    monkeypatch.setattr(module, "STAMP", venv / "llmgw-setup.cfg.sha256")
    # The CPU index is not asked in these tests: it is outside this machine.
    monkeypatch.setenv(module.TORCH_INDEX_ENV, "")
    return module


def resolve(args: list[str], report: Path) -> int:
    """What `pip install ARGS` would install into an empty environment, as pip's own report, installing nothing."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", str(report), *args],
        cwd=ROOT, timeout=600,
    ).returncode


def test_build_py_run_installs_the_runtime_and_the_sdk_but_no_torch_and_no_pytest(build, tmp_path, monkeypatch):
    report = tmp_path / "report.json"
    asked = []

    def pip_install(args):
        asked.append(args)
        return resolve(args, report)

    monkeypatch.setattr(build, "pip_install", pip_install)
    build.ensure_venv(build.RUN_EXTRAS)

    assert len(asked) == 1
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"aiohttp", "apsw", "cryptography", "openai"} <= names
    assert not names & {"torch", "pytest", "sentence-transformers", "anthropic", "gguf"}
    assert not [n for n in names if n.startswith("nvidia-") and n != "nvidia-ml-py"]


def test_build_py_test_adds_the_test_tools_and_the_embedder_to_a_venv_that_run_made(build, monkeypatch):
    asked = []
    monkeypatch.setattr(build, "pip_install", lambda args: asked.append(args) or 0)
    build.ensure_venv(build.RUN_EXTRAS)
    build.ensure_venv(build.TEST_EXTRAS)
    build.ensure_venv(build.RUN_EXTRAS)  # a later `run` takes what is there as enough
    build.ensure_venv(build.TEST_EXTRAS)

    assert [args[-1] for args in asked] == [f"{ROOT}[sdk]", f"{ROOT}[sdk,test,similar,check]"]


def test_a_change_of_setup_cfg_installs_again_what_the_command_needs(build, monkeypatch):
    asked = []
    monkeypatch.setattr(build, "pip_install", lambda args: asked.append(args) or 0)
    build.STAMP.write_text("a digest of another setup.cfg\nsdk,similar,test\n")
    build.ensure_venv(build.RUN_EXTRAS)
    build.ensure_venv(build.TEST_EXTRAS)

    # The extras installed from the old setup.cfg may be at old pins: `test` installs them again.
    assert [args[-1] for args in asked] == [f"{ROOT}[sdk]", f"{ROOT}[sdk,test,similar,check]"]


def test_an_unreachable_cpu_index_is_a_sentence_and_torch_comes_from_pips_own_indexes(build, monkeypatch, capsys):
    closed = f"http://127.0.0.1:{free_port()}/whl/cpu"
    monkeypatch.setenv(build.TORCH_INDEX_ENV, closed)

    assert build.torch_index_args() == []
    said = capsys.readouterr().out
    assert f"torch's CPU index {closed} did not answer" in said
    assert "LLMGW_TORCH_INDEX=URL python3 build.py test" in said
    assert "Traceback" not in said


def test_a_cpu_index_that_answers_is_added_to_pips(build, monkeypatch):
    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            found = self.path == "/whl/cpu/torch/"
            self.send_response(200 if found else 404)
            self.end_headers()
            page = b"<a href='torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl'>torch</a>"
            self.wfile.write(page if found else b"")

        def log_message(self, *_):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
        monkeypatch.setenv(build.TORCH_INDEX_ENV, index)
        assert build.torch_index_args() == ["--extra-index-url", index]
    finally:
        server.shutdown()
        server.server_close()


def test_pip_install_passes_on_each_step_with_its_seconds(build, monkeypatch, capsys):
    monkeypatch.setattr(build, "VENV_PYTHON", Path(sys.executable))
    rc = build.pip_install(["--dry-run", "--no-deps", "--no-index", "--no-build-isolation", "-e", str(ROOT)])

    said = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert any(line.startswith("build: pip [") and "Obtaining" in line for line in said)
