"""Codex CLI and Claude Code, from npm, configured as the Connect page says, each through a tool-calling turn.

A real `llmgw server` (with the guardrail policy `server init` installs)
in front of a sim-engine with a 32k context, as in issue 25, item 22. The
programs are the ones the page names, at the versions
tests/support/editors/package-lock.json pins, and their only configuration
is the page's own snippet, read from the page the server renders for a
signed-in person. The sim calls the tool a prompt names
(docs/sim-engine.md), so each turn is: the program asks, the model calls
one of the program's own tools, the program runs it and sends the result,
the model answers in words.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tests.support import editorclients
from tests.support.servers import usage_rows, write_config

pytestmark = pytest.mark.slow  # Codex CLI and Claude Code from npm

CONTEXT = 32768
# What the sim answers in words once a tool's result is in (docs/sim-engine.md).
WORDS = " the quick brown fox jumps over a lazy dog"


@pytest.fixture(scope="module", autouse=True)
def installed():
    editorclients.ensure_installed()


@pytest.fixture
def gateway(servers, engines, tmp_path):
    engine = engines("sim")
    config = write_config(tmp_path / "gw.yaml", {"models": [
        {"name": "sim", "endpoints": [engine.url], "context_length": CONTEXT}]})
    gw = servers("gw", config=config)
    done = gw.init("--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    gw.key, gw.admin_login = made["key"]["key"], made["administrator"]  # the first admin signs in to the portal
    return gw.start()


def snippet(gw, tool: str) -> str:
    return asyncio.run(editorclients.connect_snippet(gw.client_url, gw.admin_login["email"],
                                                     gw.admin_login["password"], tool, "sim"))


def run_codex(gw, tmp_path: Path, prompt: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`codex exec` with the Connect page's config.toml where the page says to put it; (the run, its home)."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(snippet(gw, "codex"))
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(editorclients.CODEX), "exec", "--json", "--skip-git-repo-check", prompt], cwd=work,
                          stdin=subprocess.DEVNULL, env=editorclients.environment(home, gw.key),
                          capture_output=True, text=True, timeout=180)
    return done, home


def events(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_codex_runs_a_shell_command_and_answers_through_the_gateway_configured_as_the_connect_page_says(
        gateway, tmp_path):
    done, _ = run_codex(gateway, tmp_path, "Call exec_command to see what is here.")

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    items = [e["item"] for e in events(done.stdout) if e["type"] == "item.completed"]
    ran = next(i for i in items if i["type"] == "command_execution")
    assert ran["command"].endswith(" x") and ran["exit_code"] == 127  # the sim's example argument, run by bash
    assert next(i for i in items if i["type"] == "agent_message")["text"].startswith(WORDS)
    rows = usage_rows(gateway, 2)
    assert [(r["status"], r["detail"]["api"]) for r in rows] == [(200, "responses")] * 2
    # Codex offers OpenAI's web search on every turn: left out, and said so.
    assert all(r["detail"]["tools_dropped"] == ["web_search"] for r in rows)


def test_codex_calls_a_function_of_a_namespace_and_gets_the_call_back_under_it(gateway, tmp_path):
    # Codex groups its sub-agent tools in the namespace multi_agent_v1; the engine knows close_agent by the
    # flattened name the prompt gives.
    done, home = run_codex(gateway, tmp_path, "Call multi_agent_v1__close_agent now.")

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (session,) = (home / ".codex" / "sessions").rglob("rollout-*.jsonl")
    items = [line["payload"] for line in map(json.loads, session.read_text().splitlines())
             if line.get("type") == "response_item"]
    call = next(i for i in items if i["type"] == "function_call")
    assert (call.get("namespace"), call["name"]) == ("multi_agent_v1", "close_agent")
    answered = next(i for i in items if i["type"] == "function_call_output" and i["call_id"] == call["call_id"])
    # close_agent itself read the argument: Codex found the function under its namespace.
    assert answered["output"].startswith("invalid agent id x")
    assert next(e["item"] for e in events(done.stdout) if e["type"] == "item.completed"
                and e["item"]["type"] == "agent_message")["text"].startswith(WORDS)


def test_claude_code_reads_a_file_and_answers_through_the_gateway_configured_as_the_connect_page_says(
        gateway, tmp_path):
    # The page's snippet is run as it is, its last line `claude` included; the `claude` it finds is the real
    # one, asked one question with -p (the snippet starts it interactive, which a test cannot answer).
    script = tmp_path / "connect.sh"
    script.write_text(snippet(gateway, "claude"))
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "claude").write_text(f'#!/bin/sh\nexec "{editorclients.CLAUDE}" -p --output-format stream-json '
                                     '--verbose "Use the Read tool."\n')
    (wrappers / "claude").chmod(0o755)
    env = editorclients.environment(tmp_path / "home", gateway.key)
    env["PATH"] = f"{wrappers}:{env['PATH']}"
    work = tmp_path / "work"
    work.mkdir()
    (work / "x").write_text("a line the Read tool found\n")  # "x": the sim's example for a string argument

    done = subprocess.run(["bash", str(script)], cwd=work, stdin=subprocess.DEVNULL, env=env,
                          capture_output=True, text=True, timeout=180)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = events(done.stdout)
    used = [b for e in said if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    assert [(b["name"], b["input"]) for b in used] == [("Read", {"file_path": "x"})]
    results = [b for e in said if e["type"] == "user" for b in e["message"]["content"] if b["type"] == "tool_result"]
    assert "a line the Read tool found" in results[0]["content"]
    result = said[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["result"].startswith(WORDS)
    rows = usage_rows(gateway, 2)
    assert {(r["status"], r["detail"]["api"]) for r in rows} == {(200, "messages")}
    # Claude Code asks for 32000 tokens on every request; the context holds its prompt and less than that.
    lowered = [r["detail"]["max_tokens_lowered"] for r in rows]
    assert all(d["asked"] == 32000 and d["sent"] < CONTEXT - r["prompt_tokens"] for d, r in zip(lowered, rows,
                                                                                              strict=True))
