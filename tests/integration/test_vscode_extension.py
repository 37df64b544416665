"""llmgw for VS Code against a real gateway: downloaded from it, signed in through its Connect page in Chromium,
and chatting through VS Code's language-model API with a tool call and its result both ways.

The extension is the one the gateway serves (/setup/vscode/llmgw.vsix), unpacked. It runs under node with
tests/support/vscode/host.js as its `vscode` module: the members of VS Code's API it uses, as @types/vscode
1.105 declares them. VS Code itself (code-server) is not run here: docs/editors.md says why, and what ran
against what. The gateway is a real `llmgw server` in front of a sim-engine, which calls the tool a prompt
names and answers in words once the tool's result is in (docs/sim-engine.md).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import browser  # noqa: F401 - the fixture
from tests.support.servers import usage_rows, write_config

DRIVE = Path(__file__).resolve().parents[1] / "support" / "vscode" / "drive.js"
# What the sim answers in words once a tool's result is in (docs/sim-engine.md).
WORDS = "the quick brown fox jumps over a lazy dog"


@pytest.fixture
def gateway(servers, engines, tmp_path):
    engine = engines("sim")
    config = write_config(tmp_path / "gw.yaml", {"models": [
        {"name": "sim", "endpoints": [engine.url], "context_length": 32768},
        {"name": "plain", "endpoints": [engine.url], "context_length": 4096, "max_output_tokens": 1024,
         "capabilities": ["chat"]}]})
    gw = servers("gw", config=config)
    done = gw.init("--json")
    assert done.returncode == 0, done.stderr
    gw.admin_login = json.loads(done.stdout)["administrator"]
    return gw.start()


def downloaded(gw, folder: Path) -> Path:
    with urllib.request.urlopen(f"{gw.client_url}/setup/vscode/llmgw.vsix", timeout=10) as answer:
        vsix = answer.read()
    with zipfile.ZipFile(io.BytesIO(vsix)) as zf:
        for name in zf.namelist():
            if name.startswith("extension/"):
                (folder / name.removeprefix("extension/")).write_bytes(zf.read(name))
    return folder


def test_vs_code_signs_in_through_the_connect_page_and_chats_with_a_tool_call_both_ways(
        gateway, browser, tmp_path):
    extension = downloaded(gateway, tmp_path)
    window = subprocess.Popen(["node", str(DRIVE), str(extension)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "LLMGW_MODEL": "sim",
                                   "LLMGW_WORKSPACE_GATEWAY": "http://198.51.100.7:9999"})
    try:
        opened = json.loads(window.stdout.readline() or "{}").get("opened")
        assert opened, window.stderr.read()
        # llmgw: Sign In opened the Connect page with VS Code chosen and a state of its own; signed out, the
        # browser is sent to sign in first, and comes back to the same page.
        assert opened.startswith(f"{gateway.client_url}/connect?tool=vscode&state=")
        context = browser.new_context()
        page = context.new_page()
        page.goto(opened)
        page.fill("input[name=email]", gateway.admin_login["email"])
        page.fill("input[name=password]", gateway.admin_login["password"])
        page.click("button[type=submit]")
        page.wait_for_url(opened)
        page.click("text=Make a key for this tool")
        link = page.get_attribute("#open-in-vscode", "href")
        context.close()
        window.stdin.write(link + "\n")
        window.stdin.flush()
        out, err = window.communicate(timeout=120)
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    assert window.returncode == 0, err
    seen = json.loads(out.splitlines()[-1])
    key = parse_qs(urlsplit(link).query)["key"][0]

    assert seen["commands"] == ["llmgw.enterApiKey", "llmgw.signIn", "llmgw.signOut"]
    assert seen["modelsBeforeSignIn"] == []
    # The link carried the state this window made: taken without asking, the key kept for this gateway.
    assert [s["kind"] for s in seen["afterLink"]] == ["information"]
    assert seen["keptFor"] == [f"llmgw.apiKey:{gateway.client_url}"]
    # The catalog's models, each with its sizes and what it can do; a workspace's gateway was not used.
    models = {m["id"]: m for m in seen["models"]}
    assert models["sim"]["maxInputTokens"] + models["sim"]["maxOutputTokens"] == 32768
    assert models["sim"]["capabilities"] == {"toolCalling": True, "imageInput": True}
    assert (models["plain"]["maxInputTokens"], models["plain"]["maxOutputTokens"]) == (3072, 1024)
    assert models["plain"]["capabilities"] == {"toolCalling": False, "imageInput": False}
    # The model called the tool VS Code offered; its result went back, and the answer streamed in words.
    [call] = [p for p in seen["firstTurn"] if "call" in p]
    assert call["call"] == "get_weather" and "city" in call["input"]
    words = [p["text"] for p in seen["secondTurn"]]
    assert len(words) > 1 and WORDS in "".join(words)
    assert seen["tokens"] == 3
    # A link this window did not ask for: confirmed first, naming the gateway; declined, nothing changed.
    [asked] = seen["strangeLink"]
    assert asked["kind"] == "warning" and asked["modal"] and "http://203.0.113.9:8080" in asked["message"]
    assert seen["gatewayAfterStrangeLink"] == gateway.client_url
    assert seen["keptAfterStrangeLink"] == [f"llmgw.apiKey:{gateway.client_url}"]
    assert "llmgw answered 401" in seen["refused"] and "llmgw: Sign In" in seen["refused"]
    # Both turns were the new key's ("VS Code", made on the page), recorded as any client's.
    rows = usage_rows(gateway, 2)
    assert [(r["status"], r["model"]) for r in rows] == [(200, "sim")] * 2
    for row in rows:
        record = gateway.ctl_json("ctl", "request", row["id"])
        assert record["key_name"] == "VS Code"
    assert key.startswith("sk-")
