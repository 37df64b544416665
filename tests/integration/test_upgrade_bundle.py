"""The offline bundle: made by build.py, read back with every file checked, and taken by `llmgw upgrade`."""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
import tarfile
from pathlib import Path

import pytest

from llmgw.release import ReleaseError, check_program, fetch_wheels, held_wheels, open_bundle, sha256_of
from llmgw.trust import client_ssl_context
from tests.support.pyz import pyz, with_version  # noqa: F401 - pyz is a fixture
from tests.support.servers import llmgw

pytestmark = pytest.mark.slow  # an upgrade from llmgw.pyz's bundle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("build_for_bundle", ROOT / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bundle(build, pyz, tmp_path):
    """A bundle of a 0.2.0 program and the xllamacpp wheel taken from a folder, as `dist --bundle --wheels` makes."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"xllamacpp-{build.xllamacpp_version()}-cp311-cp311-manylinux_2_28_x86_64.whl"
    (wheels / name).write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: a wheel's bytes travel as they are
    (wheels / "xllamacpp-0.0.1-py3-none-any.whl").write_bytes(b"another release: not taken")
    program = with_version(pyz, "0.2.0", tmp_path / "llmgw.pyz")
    taken = build.bundle_wheels(tmp_path / "picked", wheels)
    return build.make_bundle(program, taken, tmp_path / "llmgw-0.2.0-bundle.tar"), name


def test_the_bundle_holds_the_program_the_engine_wheel_and_their_sums_and_reads_back_checked(bundle, tmp_path):
    path, wheel = bundle
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == sorted(["bundle.json", "SHA256SUMS", "llmgw.pyz", f"wheels/{wheel}"])
    opened = open_bundle(path, tmp_path / "out")
    assert opened.version == "0.2.0" and [w.name for w in opened.wheels] == [wheel]
    assert check_program(opened.program).version == "0.2.0"


def test_upgrade_from_a_bundle_holds_its_program_and_hands_its_wheel_to_nodes_over_mutual_tls(server, bundle,
                                                                                               tmp_path):
    path, wheel = bundle
    done = server.ctl("upgrade", "--from-bundle", str(path), "--no-wait", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "llmgw 0.2.0, 1 wheel(s), every file matching its sha256" in done.stderr
    # Held by the version it said; this control plane runs from a checkout, so it holds no program of its own.
    status = server.ctl_json("upgrade", "--status")
    assert status["releases"] == ["0.2.0"]
    sent = open_bundle(path, tmp_path / "sent").wheels[0]
    assert status["wheels"] == {wheel: sha256_of(sent)}
    # A node that joins afterwards lists the wheels and fetches them into DATA/wheels before it installs
    # llama.cpp's server (as a node told to upgrade does): with its cluster certificate, and only with one.
    code = server.ctl_json("node", "add", "--name", "gpu-1")["code"]
    joined = llmgw("join", code, "--data-dir", str(tmp_path / "node"), "--config", str(tmp_path / "agent.yaml"))
    assert joined.returncode == 0, joined.stderr
    agent_port = f"127.0.0.1:{server.ports['agent']}"
    certificate = client_ssl_context(str(tmp_path / "node"))
    listed = asyncio.run(held_wheels(agent_port, certificate))
    assert listed == status["wheels"]
    got = asyncio.run(fetch_wheels(agent_port, listed, certificate, tmp_path / "node" / "wheels"))
    assert [g.read_bytes() for g in got] == [sent.read_bytes()]
    # The cluster's CA trusted, and no certificate of a node's to show.
    stranger = ssl.create_default_context(cafile=str(tmp_path / "node" / "ca.crt"))
    stranger.check_hostname = False
    with pytest.raises(ReleaseError, match="did not list its wheels"):
        asyncio.run(held_wheels(agent_port, stranger))


def test_an_install_from_a_bundle_runs_its_program_and_holds_its_wheel_for_the_nodes(bundle, tmp_path):
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from llmgw.control.adminclient import AdminClient
    from tests.support.installs import end_install
    from tests.support.pgcluster import free_port

    path, wheel = bundle
    above = Path(tempfile.mkdtemp(prefix="llmgw-bundle-install-"))
    root, ports = above / "root", {role: free_port() for role in ("client", "agent", "admin", "metrics")}
    listen = [arg for role, port in ports.items() for arg in (f"--listen-{role}", f"127.0.0.1:{port}")]
    try:
        done = subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(root),
                               "--services", "supervised", "--starter", "sim", "--no-judge", "--bundle", str(path),
                               "--bundle-sha256", sha256_of(path), *listen, "--json"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["steps"]["bundle"] == "done" and result["answer"]
        said = {p["step"]: p["sentence"] for p in map(json.loads, done.stderr.splitlines()) if p["state"] == "done"}
        assert said["program"].startswith("llmgw 0.2.0 from the bundle installed as")
        assert said["bundle"] == "llmgw 0.2.0 and 1 engine wheel(s) held for the nodes, every file matching its sha256"
        # The program installed is the bundle's, and the control plane runs it and holds its wheel for the nodes.
        assert sha256_of(root / "usr/local/bin/llmgw") == sha256_of(open_bundle(path, tmp_path / "out").program)
        status = AdminClient(f"127.0.0.1:{ports['admin']}", str(root / "var/lib/llmgw/admin-token")).call(
            "GET", "/api/v1/upgrade")
        assert status["releases"] == ["0.2.0"] and list(status["wheels"]) == [wheel]
        # A bundle that is not the one named is refused before anything is installed.
        other = tmp_path / "other"
        refused = subprocess.run([sys.executable, "-m", "llmgw", "server", "init", "--install", "--root", str(other),
                                  "--services", "supervised", "--starter", "sim", "--bundle", str(path),
                                  "--bundle-sha256", "0" * 64], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert refused.returncode == 1 and "is not the bundle whose sha256 you gave" in refused.stderr
        assert not other.exists()
    finally:
        end_install(root, f"127.0.0.1:{ports['admin']}", root / "var/lib/llmgw/admin-token")
        shutil.rmtree(above, ignore_errors=True)
