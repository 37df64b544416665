"""/mcp against a real `llmgw server`, with the mcp SDK as the agent and the SDK's MCPServer as the company's server.

One control plane and one company server for the module; each test reads
what the company server recorded it was given, and what `ctl audit` says.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.mcp.company import PLANTED
from tests.support.pgcluster import free_port
from tests.support.servers import Server, write_config
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SECRET_HEADER = "Bearer company-token-5f1e"
PASTED = "sk-proj-" + "a1B2c3D4" * 6
GUARD = {"default": ["tools"], "policies": {"tools": {
    "mode": "enforce", "input": {"secrets": "block", "injection": "block", "pii": {"email": "redact"}}}}}


class Company:
    """The company's MCP server in a process of its own, recording every call it gets."""

    def __init__(self, root: Path, name: str):
        self.port = free_port()
        self.record = root / f"{name}.jsonl"
        self.log = open(root / f"{name}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.mcp.company", str(self.port), str(self.record)],
                                     cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        wait_until(self._listening, 30, "the company's MCP server listened", interval=0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _listening(self) -> bool:
        assert self.proc.poll() is None, "the company's MCP server exited"
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def calls(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def company(tmp_path_factory):
    server = Company(tmp_path_factory.mktemp("company"), "co")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory, company):
    root = tmp_path_factory.mktemp("gw")
    server = Server(root, "gw", config=write_config(root / "server.yaml", {"guard": GUARD}))
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["key"]
    server.key, server.key_id = first["key"], first["id"]
    server.start()
    token = root / "company-token"
    token.write_text(SECRET_HEADER + "\n")
    added = server.ctl("ctl", "mcp", "add", "co", "--url", company.url, "--allow-private", "--description", "Acme",
                       "--secret-file", f"Authorization={token}", "--header", "X-Team=support", "--json")
    assert added.returncode == 0, added.stderr
    granted = server.ctl("keys", "limits", "--scope", "key", "--id", server.key_id, "--tools", "co.*")
    assert granted.returncode == 0, granted.stderr
    other = server.ctl_json("keys", "create", "other", "--project", "Acme/support/desk", "--create")
    server.ungranted = other["key"]
    wait_until(lambda: len(tools(server, server.key)) == 3, 20, "the granted key saw co's tools", interval=0.2)
    yield server
    server.stop()


async def _session(gw, key: str, work):
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    async with client, streamable_http_client(gw.client_url + "/mcp", http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def _run(gw, key: str, work):
    """The session's work, with the SDK's error as it raised it rather than inside its task group's."""
    try:
        return asyncio.run(_session(gw, key, work))
    except BaseExceptionGroup as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        raise error from None


def tools(gw, key: str) -> list[str]:
    async def work(session):
        return [t.name for t in (await session.list_tools()).tools]
    return _run(gw, key, work)


def call(gw, key: str, name: str, arguments: dict, progress=None):
    async def work(session):
        return await session.call_tool(name, arguments, progress_callback=progress)
    return _run(gw, key, work)


def _text(result) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def _post(gw, body: bytes, key: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(gw.client_url + "/mcp", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_granted_key_lists_and_calls_the_servers_tools_as_server_dot_tool(gw, company):
    assert sorted(tools(gw, gw.key)) == ["co.echo", "co.steps", "co.ticket"]
    result = call(gw, gw.key, "co.echo", {"text": "hello from the agent"})
    assert not result.is_error and _text(result) == "echo: hello from the agent"
    seen = [c for c in company.calls() if c["arguments"] == {"text": "hello from the agent"}][-1]
    # The server is told who calls, with llmgw's credentials: never the caller's key.
    assert seen["headers"]["x-llmgw-key"] == gw.key_id
    assert seen["headers"]["x-llmgw-project"].count("/") == 2
    assert seen["headers"]["authorization"] == SECRET_HEADER and seen["headers"]["x-team"] == "support"
    assert gw.key not in json.dumps(company.calls())


def test_a_key_without_the_grant_sees_no_tools_and_cannot_call_one(gw, company):
    assert tools(gw, gw.ungranted) == []
    with pytest.raises(MCPError, match="there is no tool co.echo this key may call"):
        call(gw, gw.ungranted, "co.echo", {"text": "let me in"})
    assert not any(c["arguments"] == {"text": "let me in"} for c in company.calls())


def test_a_planted_instruction_in_a_tools_answer_is_refused_before_the_agent_reads_it(gw):
    result = call(gw, gw.key, "co.ticket", {"number": 42})
    assert result.is_error
    assert "injection" in _text(result) and "printer on fire" not in _text(result)
    assert PLANTED not in json.dumps(result.model_dump())


def test_personal_data_in_a_tools_answer_is_redacted(gw):
    result = call(gw, gw.key, "co.ticket", {"number": 7})
    assert not result.is_error
    assert _text(result) == "Ticket 7 was opened by [EMAIL_1]"


def test_a_secret_pasted_into_the_arguments_never_reaches_the_server(gw, company):
    result = call(gw, gw.key, "co.echo", {"text": f"use {PASTED} for the deploy"})
    assert result.is_error and "secrets" in _text(result) and PASTED not in _text(result)
    assert PASTED not in json.dumps(company.calls())


def test_a_servers_progress_is_passed_on_to_the_agent(gw):
    seen = []

    async def progress(done, total, message):
        seen.append((done, total, message))

    result = call(gw, gw.key, "co.steps", {"count": 3}, progress)
    assert _text(result) == "did 3 steps"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_every_call_is_in_ctl_audit_with_the_arguments_digest_never_their_text(gw):
    # A call the guardrails refuse (its answer carries a planted instruction) is audited as well; made here,
    # since the module's tests run in any order.
    call(gw, gw.key, "co.ticket", {"number": 42})
    call(gw, gw.key, "co.echo", {"text": "audited words"})

    def entry():
        rows = gw.ctl_json("ctl", "audit", "--target", "co.echo", "--limit", "100")
        tickets = gw.ctl_json("ctl", "audit", "--target", "co.ticket", "--limit", "100")
        if not any(r["action"] == "mcp.call" for r in tickets):
            return None
        return next((r for r in rows if r["action"] == "mcp.call"), None)

    row = wait_until(entry, 10, "both calls were in the audit log", interval=0.2)
    assert row["after"]["key"] == gw.key_id and row["after"]["outcome"] == "ok"
    assert len(row["after"]["arguments_sha256"]) == 64 and row["after"]["arguments_bytes"] > 0
    everything = gw.ctl("ctl", "audit", "--limit", "1000", "--json").stdout
    assert "audited words" not in everything and SECRET_HEADER not in everything
    refused = [r for r in json.loads(everything) if r["target"] == "co.ticket" and r["action"] == "mcp.call"]
    assert refused and {"guardrail_blocked", "ok"} >= {r["after"]["outcome"] for r in refused}
    with urllib.request.urlopen(f"http://127.0.0.1:{gw.ports['metrics']}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert 'llmgw_mcp_tool_calls_total{outcome="ok",server="co",tool="echo"}' in metrics
    assert 'llmgw_mcp_tool_call_seconds_count{server="co",tool="echo"}' in metrics


def test_five_failures_in_a_row_take_a_server_out_and_its_tools_leave_the_list(gw, tmp_path):
    # A server that answers, then is stopped: every call after fails to connect, as a server down would.
    gone = Company(tmp_path, "gone")
    try:
        assert gw.ctl("ctl", "mcp", "add", "gone", "--url", gone.url, "--allow-private").returncode == 0
        assert gw.ctl("keys", "limits", "--scope", "key", "--id", gw.key_id, "--tools", "co.*,gone.*").returncode == 0
        wait_until(lambda: "gone.echo" in tools(gw, gw.key), 20, "gone's tools were listed", interval=0.2)
    finally:
        gone.stop()
    for _ in range(5):
        failed = call(gw, gw.key, "gone.echo", {"text": "anyone there?"})
        assert failed.is_error and "could not be reached" in _text(failed)
    out = call(gw, gw.key, "gone.echo", {"text": "anyone there?"})
    assert out.is_error and "failed 5 calls in a row" in _text(out)
    listed = tools(gw, gw.key)
    assert "co.echo" in listed and not any(t.startswith("gone.") for t in listed)
    assert gw.ctl("ctl", "mcp", "remove", "gone").returncode == 0


def test_a_caller_over_a_servers_rate_is_told_when_to_try_again(gw, company):
    assert gw.ctl("ctl", "mcp", "add", "rated", "--url", company.url, "--allow-private", "--rate", "2").returncode == 0
    assert gw.ctl("keys", "limits", "--scope", "key", "--id", gw.key_id, "--tools", "co.*,rated.*").returncode == 0
    try:
        wait_until(lambda: "rated.echo" in tools(gw, gw.key), 20, "rated's tools were listed", interval=0.2)
        for n in range(2):
            assert _text(call(gw, gw.key, "rated.echo", {"text": f"call {n}"})) == f"echo: call {n}"
        over = call(gw, gw.key, "rated.echo", {"text": "one too many"})
        assert over.is_error and "2 times a minute; try again in" in _text(over)
        assert not any(c["arguments"] == {"text": "one too many"} for c in company.calls())
        # Another server's tools are not counted against it.
        assert _text(call(gw, gw.key, "co.echo", {"text": "still fine"})) == "echo: still fine"
    finally:
        gw.ctl("ctl", "mcp", "remove", "rated")
        gw.ctl("keys", "limits", "--scope", "key", "--id", gw.key_id, "--tools", "co.*")


def test_a_stdio_server_runs_on_the_control_plane_with_its_credentials_as_its_environment_only(gw, tmp_path):
    token = tmp_path / "token"
    token.write_text("stdio-secret-9a\n")
    command = f"{sys.executable} -m tests.mcp.company stdio"
    added = gw.ctl("ctl", "mcp", "add", "local", "--stdio", command, "--user", "", "--header", f"PYTHONPATH={ROOT}",
                   "--secret-file", f"COMPANY_TOKEN={token}")
    assert added.returncode == 0, added.stderr
    assert gw.ctl("keys", "limits", "--scope", "key", "--id", gw.key_id, "--tools", "co.*,local.*").returncode == 0
    try:
        wait_until(lambda: "local.whoami" in tools(gw, gw.key), 30, "the stdio server's tools were listed",
                   interval=0.2)
        assert _text(call(gw, gw.key, "local.echo", {"text": "over a pipe"})) == "echo: over a pipe"
        facts = json.loads(_text(call(gw, gw.key, "local.whoami", {})))
        assert facts["uid"] == os.geteuid()
        assert facts["token_sha256"] == hashlib.sha256(b"stdio-secret-9a").hexdigest()
        # Its environment is its own: the control plane's (here, the test's) is not handed down.
        assert set(facts["environment"]) <= {"PATH", "LANG", "HOME", "USER", "LOGNAME", "PYTHONPATH", "COMPANY_TOKEN",
                                             "LC_CTYPE"}
        listed = gw.ctl_json("ctl", "mcp", "list")
        assert "stdio-secret-9a" not in json.dumps(listed)
    finally:
        gw.ctl("ctl", "mcp", "remove", "local")
        gw.ctl("keys", "limits", "--scope", "key", "--id", gw.key_id, "--tools", "co.*")


def test_bad_messages_and_keys_get_a_sentence_not_a_traceback(gw):
    status, body = _post(gw, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', None)
    assert status == 401 and "no API key" in body["error"]["message"]
    status, body = _post(gw, b"{not json", gw.key)
    assert status == 400 and body["error"]["code"] == -32700
    status, body = _post(gw, b'{"id": 1, "method": "tools/list"}', gw.key)
    assert status == 400 and "JSON-RPC 2.0" in body["error"]["message"]
    status, body = _post(gw, b'{"jsonrpc": "2.0", "id": 2, "method": "resources/list"}', gw.key)
    assert body["error"]["code"] == -32601 and "does not answer resources/list" in body["error"]["message"]
    status, body = _post(gw, b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "co.nope"}}',
                         gw.key)
    assert body["error"]["code"] == -32602 and "no tool co.nope" in body["error"]["message"]
    revoked = gw.ctl_json("keys", "create", "gone", "--project", "Acme/support/desk", "--create")
    assert gw.ctl("keys", "revoke", revoked["id"]).returncode == 0
    status, body = _post(gw, b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list"}', revoked["key"])
    assert status == 401 and "revoked" in body["error"]["message"]


def test_ctl_mcp_registers_lists_tests_disables_and_removes_a_server(gw, company):
    try:
        urllib.request.urlopen(f"http://{gw.admin}/api/v1/mcp/servers", timeout=5)
        raise AssertionError("the admin API listed the MCP servers without its token")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    refused = gw.ctl("ctl", "mcp", "add", "local", "--url", company.url)
    assert refused.returncode == 1 and "--allow-private" in refused.stderr
    assert gw.ctl("ctl", "mcp", "add", "desk", "--url", company.url, "--allow-private", "--rate", "2",
                  "--header-ref", "Authorization=env:LLMGW_TEST_UNSET_TOKEN").returncode == 0
    listed = {s["name"]: s for s in gw.ctl_json("ctl", "mcp", "list")}
    assert listed["co"]["secret_headers"] == ["Authorization"] and SECRET_HEADER not in json.dumps(listed)
    assert listed["desk"]["rate"] == 2
    tested = gw.ctl_json("ctl", "mcp", "test", "co")
    assert sorted(t["name"] for t in tested["tools"]) == ["co.echo", "co.steps", "co.ticket"]
    unset = gw.ctl("ctl", "mcp", "test", "desk")
    assert unset.returncode == 1 and "LLMGW_TEST_UNSET_TOKEN" in unset.stderr
    assert gw.ctl("ctl", "mcp", "add", "co", "--url", company.url, "--allow-private", "--replace", "--disabled",
                  "--secret-file", f"Authorization={gw.data_dir.parent / 'company-token'}").returncode == 0
    wait_until(lambda: not any(t.startswith("co.") for t in tools(gw, gw.key)), 20,
               "a disabled server's tools left the list", interval=0.2)
    # Back as the module's fixture made it (its description and header too): the tests run in any order.
    assert gw.ctl("ctl", "mcp", "add", "co", "--url", company.url, "--allow-private", "--replace",
                  "--description", "Acme", "--header", "X-Team=support",
                  "--secret-file", f"Authorization={gw.data_dir.parent / 'company-token'}").returncode == 0
    wait_until(lambda: "co.echo" in tools(gw, gw.key), 20, "co's tools came back", interval=0.2)
    gone = gw.ctl("ctl", "mcp", "remove", "desk")
    assert gone.returncode == 0 and "removed" in gone.stdout
    missing = gw.ctl("ctl", "mcp", "remove", "desk")
    assert missing.returncode == 1 and "no MCP server named desk" in missing.stderr
    actions = {r["action"] for r in gw.ctl_json("ctl", "audit", "--limit", "200")}
    assert {"mcp.server.add", "mcp.server.update", "mcp.server.remove"} <= actions


def _cluster_tools_granted(server) -> str:
    """A key granted the cluster's own tools alone, once `llmgw` is registered as llmgw:admin."""
    added = server.ctl("ctl", "mcp", "add", "llmgw", "--url", "llmgw:admin")
    assert added.returncode == 0, added.stderr
    made = server.ctl_json("keys", "create", "ops-agent", "--project", "Acme/ops/agents", "--create")
    granted = server.ctl("keys", "limits", "--scope", "key", "--id", made["id"], "--tools", "llmgw.*")
    assert granted.returncode == 0, granted.stderr
    wait_until(lambda: len(tools(server, made["key"])) == 6, 20, "the granted key saw the cluster's tools",
               interval=0.2)
    return made["key"]


def test_the_clusters_own_tools_are_granted_like_any_other_and_say_what_ctl_says(gw):
    key = _cluster_tools_granted(gw)
    assert sorted(tools(gw, key)) == ["llmgw.cluster_status", "llmgw.explain_placement", "llmgw.list_models",
                                      "llmgw.list_nodes", "llmgw.list_replicas", "llmgw.node_logs"]
    # A key granted co.* only does not see them.
    assert not any(t.startswith("llmgw.") for t in tools(gw, gw.key))

    status = call(gw, key, "llmgw.cluster_status", {})
    assert not status.is_error
    assert status.structured_content["answered_by"] == {"control_plane": "gw", "role": "leader", "leader": "gw"}
    assert "gw" in _text(status)
    missing = call(gw, key, "llmgw.explain_placement", {})
    assert missing.is_error and '"model"' in _text(missing)
    audit = gw.ctl_json("ctl", "audit", "--limit", "20")
    assert any(e["action"] == "mcp.call" and e["target"] == "llmgw.cluster_status" for e in audit)


def test_with_worker_processes_the_clusters_own_tools_are_answered_by_the_main_process(tmp_path):
    # A worker serves /mcp but holds no cluster: it asks the main process over the admin API on loopback.
    server = Server(tmp_path, "gw2", config=write_config(tmp_path / "server.yaml", {"workers": 2}))
    assert server.init().returncode == 0
    server.start()
    try:
        key = _cluster_tools_granted(server)
        for _ in range(4):  # over new connections, so both workers answer some
            status = call(server, key, "llmgw.cluster_status", {})
            assert not status.is_error, _text(status)
            assert status.structured_content["answered_by"]["control_plane"] == "gw2"
        nodes = call(server, key, "llmgw.node_logs", {"node": "node-z"})
        assert nodes.is_error and "there is no node node-z" in _text(nodes)
    finally:
        server.stop()
