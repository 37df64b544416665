"""The seam end to end: what an adapter builds, started as a real process, answers as the supervisor expects.

The sim needs nothing installed; llama.cpp runs as the agent's installed
server (xllamacpp from PyPI, see test_llamacpp_real.py), serving the tiny
GGUF the tests write — so the argv the llamacpp adapter builds is one
llama.cpp's own server takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from llmgw import engines
from llmgw.engines.llamacpp_install import installed_llama_server
from llmgw.protocol.messages import EngineProfile
from tests.fixtures.tinygguf import write_tiny_gguf
from tests.support.pgcluster import free_port


def run(launch: engines.Launch, log_path):
    log = open(log_path, "wb")
    return subprocess.Popen(launch.argv, env={**os.environ, **launch.env}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def get(url: str, key: str = ""):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_healthy(proc, base: str, launch: engines.Launch, log_path, key: str = "") -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status, _ = get(base + launch.health_path, key)
            if status == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    pytest.fail(f"{launch.argv[0]} did not answer {launch.health_path}:\n" + log_path.read_text()[-3000:])


def stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_sim_adapters_command_starts_a_sim_engine_that_answers_health_and_lists_the_model(tmp_path):
    profile = EngineProfile(engine="sim", model="sim-chat", context_length=2048, args=["--ttft", "0"])
    port = free_port()
    launch = engines.engine("sim").command(profile, model_path="", port=port, host="127.0.0.1")
    proc = run(launch, tmp_path / "sim.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, launch, tmp_path / "sim.log")
        status, body = get(base + "/v1/models")
        assert status == 200
        assert [m["id"] for m in json.loads(body)["data"]] == ["sim-chat"]
        status, _ = get(base + launch.metrics_path)
        assert status == 200
    finally:
        stop(proc)


def test_the_llamacpp_adapters_command_is_one_llamas_own_server_takes(tmp_path):
    server = asyncio.run(installed_llama_server(tmp_path / "agent-data"))
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    key_file = tmp_path / "key"
    key_file.write_text("sk-adapter-test\n")
    profile = EngineProfile(engine="llamacpp", model="tiny-judge", source="http://mirror/tiny.gguf",
                            context_length=1024, slots=2, cpu_cores=1, role="judge")
    adapter = engines.engine("llamacpp")
    adapter.validate(profile, model_path=str(model))
    port = free_port()
    launch = adapter.command(profile, model_path=str(model), port=port, host="127.0.0.1",
                             api_key_file=str(key_file), binary=server.argv_prefix)
    proc = run(launch, tmp_path / "llama.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, launch, tmp_path / "llama.log", key="sk-adapter-test")
        assert get(base + "/v1/models")[0] == 401  # the key file was given
        status, body = get(base + "/v1/models", key="sk-adapter-test")
        assert status == 200
        assert "tiny-judge" in [m["id"] for m in json.loads(body)["data"]]
        status, text = get(base + launch.metrics_path, key="sk-adapter-test")
        assert status == 200 and b"llamacpp:" in text
    finally:
        stop(proc)
