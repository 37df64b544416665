"""A site's plugin, installed beside llmgw (not into it), seen by a real server, `ctl status` and `doctor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import openai
import pytest

import llmgw
from tests.fixtures.plugindist import WORDGUARD, install_plugin
from tests.support.servers import write_config

ZORBLAX = {"llmgw.detectors": {"zorblax": "wordguard:Zorblax"}}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on every llmgw process's PYTHONPATH, into which a test installs plugins."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))
    return folder


def _gateway(servers, engines, tmp_path, guard: dict, workers: int = 1):
    engine = engines("qwen", "--echo")
    config = write_config(tmp_path / "server.yaml", {"models": [{"name": "qwen", "endpoints": [engine.url]}],
                                                     "guard": guard, "workers": workers})
    server = servers("gw", config=config)
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    server.key = json.loads(done.stdout)["key"]["key"]
    return server, _client(server)


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(api_key=server.key, base_url=server.client_url + "/v1", max_retries=0)


# With workers, each worker process guards requests itself and must have loaded the plugin too.
@pytest.mark.parametrize("workers", [1, 2])
def test_a_plugins_detector_refuses_a_prompt_under_a_policy_that_names_it(site, servers, engines, tmp_path, workers):
    install_plugin(site, "wordguard", {"wordguard.py": WORDGUARD}, ZORBLAX)
    gw, client = _gateway(servers, engines, tmp_path, workers=workers, guard={
        "default": ["words"], "policies": {"words": {"input": {"detectors": {"zorblax": "block"}}}}})

    # A new connection each time, so that the kernel hands them to more than one worker.
    for _ in range(4 * workers):
        with pytest.raises(openai.BadRequestError) as refused, _client(gw) as fresh:
            fresh.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "say Zorblax"}])
        assert refused.value.body["code"] == "guardrail_blocked" and "zorblax" in refused.value.body["message"]
    fine = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "say hello"}])
    assert fine.choices[0].message.content.strip() == "say hello"

    status = gw.ctl("ctl", "status")
    assert status.returncode == 0, status.stderr
    assert "plugin:" in status.stdout and "zorblax from wordguard 0.1.0 (llmgw.detectors): zorblax" in status.stdout
    plugins = gw.ctl_json("ctl", "status")["plugins"]
    assert {"group": "llmgw.detectors", "name": "zorblax", "distribution": "wordguard", "version": "0.1.0",
            "value": "wordguard:Zorblax", "provides": ["zorblax"], "loaded": True, "error": ""} in plugins


def test_a_plugins_detector_redacts_what_a_policy_says_to_before_the_engine_reads_it(
        site, servers, engines, tmp_path):
    install_plugin(site, "wordguard", {"wordguard.py": WORDGUARD}, ZORBLAX)
    gw, client = _gateway(servers, engines, tmp_path, guard={
        "default": ["words"], "policies": {"words": {"input": {"detectors": {"zorblax": "redact"}}}}})
    echoed = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "say zorblax now"}])
    assert echoed.choices[0].message.content.strip() == "say [ZORBLAX_1] now"


def test_a_plugin_that_raises_on_import_leaves_the_server_up_with_a_warning_in_its_log(
        site, servers, engines, tmp_path):
    install_plugin(site, "broken-guard", {"brokenguard.py": "raise ImportError('needs libfoo.so.3')\n"},
                   {"llmgw.detectors": {"broken": "brokenguard:Detector"}})
    gw, client = _gateway(servers, engines, tmp_path, {
        "default": ["privacy"], "policies": {"privacy": {"input": {"secrets": "block"}}}})

    answer = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "say hello"}])
    assert answer.choices[0].message.content.strip() == "say hello"
    assert ("the detector plugin broken (broken-guard 0.1.0, brokenguard:Detector) raised ImportError: "
            "needs libfoo.so.3; it is left out, and the gateway runs without it") in gw.output()
    assert "Traceback" not in gw.output()
    status = gw.ctl("ctl", "status")
    assert "broken from broken-guard 0.1.0 (llmgw.detectors): NOT LOADED, it raised ImportError" in status.stdout


FRAGILE = '''
class Fragile:
    kind = "fragile"

    def find(self, text):
        if "boom" in text:
            raise ValueError("a bug in the plugin")
        return []
'''


def test_a_plugin_detector_that_raises_refuses_the_text_it_could_not_read_and_the_server_goes_on(
        site, servers, engines, tmp_path):
    install_plugin(site, "fragile-guard", {"fragileguard.py": FRAGILE},
                   {"llmgw.detectors": {"fragile": "fragileguard:Fragile"}})
    gw, client = _gateway(servers, engines, tmp_path, guard={
        "default": ["fragile"], "policies": {"fragile": {"input": {"detectors": {"fragile": "flag"}}}}})
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "boom"}])
    assert failed.value.body["code"] == "internal_error" and "server's log" in failed.value.body["message"]
    assert "ValueError: a bug in the plugin" in gw.output()
    fine = client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "say hello"}])
    assert fine.choices[0].message.content.strip() == "say hello"


def test_a_policy_naming_a_detector_no_plugin_gives_is_refused_by_ctl_config_set(servers, engines, tmp_path):
    gw, _ = _gateway(servers, engines, tmp_path, {})
    done = gw.ctl("ctl", "config", "set", "guard.policies.words.input.detectors.zorblax", "block")
    assert done.returncode == 1
    assert ("guard.policies.words.input.detectors.zorblax: no installed plugin gives a detector of kind "
            "'zorblax'") in done.stderr


def test_doctor_lists_the_plugins_and_a_broken_one_is_a_problem(site, tmp_path):
    install_plugin(site, "wordguard", {"wordguard.py": WORDGUARD}, ZORBLAX)
    install_plugin(site, "broken-guard", {"brokenguard.py": "raise ImportError('needs libfoo.so.3')\n"},
                   {"llmgw.detectors": {"broken": "brokenguard:Detector"}})
    config = write_config(tmp_path / "agent.yaml", {"cache_dir": str(tmp_path / "weights"),
                                                    "data_dir": str(tmp_path / "state"),
                                                    "discovery": {"dcgm_exporter": "off"}})
    shown = subprocess.run([sys.executable, "-m", "llmgw", "doctor", "--config", config, "--no-bandwidth"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith("llmgw.")]
    assert ["llmgw.detectors", "zorblax", "wordguard", "0.1.0", "zorblax"] in rows
    assert ["llmgw.scorers", "llmgw", "llmgw", llmgw.__version__, "session,", "latency,", "queue,", "kv,",
            "prefix"] in rows
    assert ("the plugin broken (broken-guard 0.1.0, llmgw.detectors) raised ImportError: needs libfoo.so.3; the "
            "server and the agent leave it out: fix it, or uninstall broken-guard") in shown.stdout
