"""`llmgw strata-serve` against a stand-in Strata: setup prepares the model, then the process becomes the server.

Strata cannot be fetched here, so tests/fixtures/strata_standin.py writes a
setup.py and serve/server.py that check what they are given; the command
that starts them is the one the strata adapter builds for the agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from llmgw import engines
from llmgw.agent.agent import installed_engines
from llmgw.config.agent import AgentConfig, EngineSettings, StrataSettings
from llmgw.protocol.messages import EngineProfile
from tests.fixtures.strata_standin import write_strata
from tests.support.pgcluster import free_port

KEY = "sk-strata-test"


def profile(**kw) -> EngineProfile:
    base = dict(engine="strata", model="qwen3.8-flash-next", source="/w/q38", gpus=[0], context_length=32768,
                args=["--family", "qwen", "--size", "IQ2_XS"])
    base.update(kw)
    return EngineProfile(**base)


def request(url: str, key: str = "", body: dict | None = None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def weights(tmp_path) -> Path:
    directory = tmp_path / "weights"
    directory.mkdir()
    (directory / "Qwen3.8-Flash-Next-GSQ-RCO-IQ2_XS-00001-of-00002.gguf").write_bytes(b"GGUF")
    return directory


def launch_for(tmp_path, weights, model_profile=None, binary=None):
    strata = write_strata(tmp_path)
    key_file = tmp_path / "shard.key"
    key_file.write_text(KEY + "\n")
    port = free_port()
    launch = engines.engine("strata").command(model_profile or profile(), model_path=str(weights), port=port,
                                              host="127.0.0.1", api_key_file=str(key_file),
                                              binary=binary or strata.binary(), shard_id="r1")
    return launch, port


def start(launch, tmp_path):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # As the supervisor starts an engine: HOME is the engine user's, and the key only in the environment.
    env = {**{k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"}, **launch.env, "HOME": str(home)}
    log = open(tmp_path / "engine.log", "wb")
    proc = subprocess.Popen(launch.argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, home


def stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_healthy(proc, base: str, tmp_path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if request(base + "/health")[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    pytest.fail("strata-serve did not answer /health:\n" + (tmp_path / "engine.log").read_text()[-3000:])


def test_strata_serve_prepares_the_model_then_becomes_strata_server_which_answers_behind_the_key(tmp_path, weights):
    launch, port = launch_for(tmp_path, weights)
    assert KEY not in " ".join(launch.argv) and launch.env["STRATA_API_KEY"] == KEY
    proc, home = start(launch, tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, tmp_path)
        # The process the supervisor started is the server now: exec'd, nothing of llmgw left in between.
        cmdline = psutil.Process(proc.pid).cmdline()
        assert cmdline[1].endswith("serve/server.py") and "--engine" in cmdline
        assert KEY not in " ".join(cmdline)

        status, body = request(base + "/v1/models", KEY)
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["qwen3.8-flash-next"]
        status, body = request(base + "/v1/chat/completions", KEY,
                               {"model": "qwen3.8-flash-next", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "Hello from Strata"
        status, body = request(base + "/v1/chat/completions", KEY, {"model": "qwen3.8-flash-next", "stream": True,
                                                                      "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and body.rstrip().endswith(b"data: [DONE]") and b'"content": " Strata"' in body
        assert request(base + "/v1/chat/completions", "", {"model": "x", "messages": []})[0] == 401
        assert request(base + launch.metrics_path, KEY)[0] == 200

        # Its state and data under the engine user's home: setup's config in the shared data, the replica's
        # own copy (the catalog's name, the agent's engine, no key) in its state.
        state, data = home / "strata" / "r1", home / "strata" / "data"
        assert (data / "strata-qwen-iq2_xs.json").is_file() and (data / "models").is_dir()
        mine = json.loads((state / "strata.json").read_text())
        assert mine["model_name"] == "qwen3.8-flash-next" and "api_key" not in mine
        assert mine["exe"] == str(tmp_path / "Strata" / "engine" / "strata")
        assert mine["parallel"] is None and mine["args"] == ["--max-context", "32768"]
        assert (state / "strata.json").stat().st_mode & 0o077 == 0
        assert "no key in my environment" in (state / "setup.log").read_text()
    finally:
        stop(proc)


def llmgw_strata_serve(tmp_path, weights, *, strata: Path, setup_args: list[str]):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "llmgw", "strata-serve", "--listen", f"127.0.0.1:{free_port()}",
            "--model", "q38", "--weights", str(weights), "--state", "strata/r1", "--data", "strata/data",
            "--python", sys.executable, "--strata", str(strata), "--engine", str(strata / "engine"), "--",
            *setup_args]
    env = {**os.environ, "HOME": str(home), "STRATA_API_KEY": KEY}
    return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_a_missing_strata_directory_is_refused_in_a_sentence_naming_where_to_name_one(tmp_path, weights):
    done = llmgw_strata_serve(tmp_path, weights, strata=tmp_path / "nowhere", setup_args=["--family", "qwen"])
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"llmgw: strata-serve: there is no Strata directory at {tmp_path / 'nowhere'}; name the directory of "
        "Strata's source (where setup.py is) in agent.yaml (engines.strata.dir)"]


def test_a_strata_without_its_engine_is_refused_naming_the_part_missing(tmp_path, weights):
    strata = write_strata(tmp_path)
    (strata.engine / "strata").unlink()
    done = llmgw_strata_serve(tmp_path, weights, strata=strata.source, setup_args=["--family", "qwen"])
    assert done.returncode == 1
    assert f"is not a whole Strata: its engine, {strata.engine / 'strata'}, is missing" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_setup_that_fails_is_refused_with_the_tail_of_its_output_and_no_server_starts(tmp_path, weights):
    strata = write_strata(tmp_path)
    done = llmgw_strata_serve(tmp_path, weights, strata=strata.source,
                              setup_args=["--family", "broken", "--size", "IQ2_XS"])
    assert done.returncode == 1
    log = tmp_path / "home" / "strata" / "r1" / "setup.log"
    assert done.stderr.startswith("llmgw: strata-serve: Strata's setup failed (exit 3) preparing q38; the last "
                                  f"lines it wrote (all of them in {log}):")
    assert done.stderr.rstrip().endswith("  setup: downloading the MTP draft layer\n"
                                         "  setup: the draft layer's checksum does not match")
    assert "Traceback" not in done.stderr
    # Setup's own lines also went to the shard's output, where `llmgw ctl logs` reads them.
    assert "setup: checking this PC" in done.stdout


def test_strata_serve_help_says_what_it_does_not_that_it_is_unbuilt():
    done = subprocess.run([sys.executable, "-m", "llmgw", "strata-serve", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    assert "Prepare a model with Strata's own setup" in done.stdout and "not built" not in done.stdout
    assert "STRATA_API_KEY" in done.stdout


def test_a_strata_named_in_agent_yaml_is_reported_as_the_nodes_with_its_version(tmp_path):
    strata = write_strata(tmp_path)
    cfg = AgentConfig(engines=EngineSettings(user="", strata=StrataSettings(
        dir=str(strata.source), python=strata.python)))
    assert installed_engines(cfg)["strata"] == "0.2.7"
    assert "strata" not in installed_engines(AgentConfig(engines=EngineSettings(user="")))
