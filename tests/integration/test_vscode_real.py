"""llmgw for VS Code in VS Code itself: code-server 4.105.1 (VS Code 1.105.1), driven in headless Chromium.

The .vsix is downloaded from a real `llmgw server` and installed with code-server's own
`--install-extension`. In the workbench, a person runs llmgw: Enter API Key from the Command Palette and types
a key. Another extension (tests/support/vscode/probe) then asks `vscode.lm` for llmgw's models, as any
extension may, and chats with one through a tool call and its result, writing what it got to a file. The
model is a sim-engine's, which calls the tool a prompt names and answers in words once its result is in.

code-server is installed once a machine (tests/support/codeserver.py says how, and why step by step).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support import codeserver
from tests.support.browser import browser  # noqa: F401 - the fixture
from tests.support.pgcluster import free_port
from tests.support.servers import write_config
from tests.support.waiting import wait_until

HERE = Path(__file__).resolve().parents[1] / "support" / "vscode"
VSCE = HERE / "node_modules" / ".bin" / "vsce"
WORDS = "the quick brown fox jumps over a lazy dog"

pytestmark = pytest.mark.timeout(900)  # code-server's first install on a machine: about 3 minutes


@pytest.fixture(scope="module")
def code_server() -> Path:
    return codeserver.installed()


@pytest.fixture
def gateway(servers, engines, tmp_path):
    engine = engines("sim")
    config = write_config(tmp_path / "gw.yaml", {"models": [
        {"name": "sim", "endpoints": [engine.url], "context_length": 32768}]})
    gw = servers("gw", config=config)
    done = gw.init("--json")
    assert done.returncode == 0, done.stderr
    gw.key = json.loads(done.stdout)["key"]["key"]
    return gw.start()


def vscode(code_server: Path, home: Path, *args: str, env: dict | None = None, **kwargs):
    """code-server with this test's own user data, extensions and HOME."""
    argv = [str(codeserver.node(code_server)), str(codeserver.entry(code_server)),
            "--user-data-dir", str(home / "data"), "--extensions-dir", str(home / "extensions"), *args]
    return argv, {**os.environ, "HOME": str(home), **(env or {})}


def install(code_server: Path, home: Path, vsix: Path) -> str:
    argv, env = vscode(code_server, home, "--install-extension", str(vsix))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_vs_code_installs_the_gateways_extension_and_another_extension_chats_through_it_with_a_tool(
        code_server, gateway, browser, tmp_path):
    home = tmp_path / "home"
    (home / "data" / "User").mkdir(parents=True)
    # No folder-trust question, no welcome page: the workbench opens to the folder.
    (home / "data" / "User" / "settings.json").write_text(json.dumps({
        "security.workspace.trust.enabled": False, "workbench.startupEditor": "none",
        "telemetry.telemetryLevel": "off"}))
    vsix = tmp_path / "llmgw.vsix"
    with urllib.request.urlopen(f"{gateway.client_url}/setup/vscode/llmgw.vsix", timeout=10) as answer:
        vsix.write_bytes(answer.read())
    assert "Extension 'llmgw.vsix' was successfully installed." in install(code_server, home, vsix)
    probe = tmp_path / "probe.vsix"
    packed = subprocess.run([str(VSCE), "package", "--allow-missing-repository", "-o", str(probe)],
                            cwd=HERE / "probe", capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    install(code_server, home, probe)
    assert {p.name.rsplit("-", 1)[0] for p in (home / "extensions").iterdir() if p.is_dir()} == {
        "llmgw.llmgw", "llmgwtest.probe"}

    folder = tmp_path / "work"
    folder.mkdir()
    out = tmp_path / "probe.jsonl"
    port = free_port()
    argv, env = vscode(code_server, home, "--bind-addr", f"127.0.0.1:{port}", "--auth", "none",
                       "--disable-telemetry", "--disable-update-check", str(folder),
                       env={"LLMGW_PROBE_OUT": str(out), "LLMGW_PROBE_MODEL": "sim"})
    with open(tmp_path / "code-server.log", "wb") as log:
        server = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="code-server answered")
        page.goto(f"http://127.0.0.1:{port}/?folder={folder}", timeout=120_000)
        page.wait_for_selector(".monaco-workbench .command-center-center", timeout=120_000)
        wait_until(lambda: out.exists() and "activated" in out.read_text(), timeout=60,
                   what="the probe extension started in VS Code's extension host")
        # llmgw: Enter API Key, from the Command Palette, as a person runs it.
        page.click(".command-center-center")
        page.keyboard.type(">llmgw: Enter API Key")
        page.wait_for_selector(".quick-input-list .monaco-list-row:has-text('llmgw: Enter API Key')")
        page.keyboard.press("Enter")
        page.wait_for_selector(f".quick-input-message:has-text('An API key of llmgw at {gateway.client_url}')")
        page.keyboard.type(gateway.key)
        page.keyboard.press("Enter")
        steps = wait_until(lambda: _done(out), timeout=120, what="the probe chatted through llmgw's models")
        page.screenshot(path=str(tmp_path / "workbench.png"))
    finally:
        context.close()
        server.terminate()
        server.wait(timeout=30)

    assert "error" not in steps, steps["error"]
    assert steps["models"] == [{"id": "sim", "vendor": "llmgw", "family": "sim", "maxInputTokens": 24576}]
    [call] = [p for p in steps["first"] if "call" in p]
    assert call["call"] == "get_weather" and "city" in call["input"]
    words = [p["text"] for p in steps["second"]]
    assert len(words) > 1 and WORDS in "".join(words)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _done(out: Path) -> dict | None:
    """The probe's steps by name, once it has chatted twice or failed."""
    if not out.exists():
        return None
    steps = {key: value for line in out.read_text().splitlines() if line
             for key, value in json.loads(line).items()}
    return steps if "second" in steps or "error" in steps else None
