"""The company's MCP servers as the store keeps them, and the tools each level of the tree grants."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Limits, McpServer, StoreError


def _jira(**changes) -> McpServer:
    fields = dict(name="jira", url="https://jira.example.com/mcp", description="Acme Jira",
                  headers={"X-Team": "support"}, header_refs={"X-Token": "env:JIRA_TOKEN"},
                  secret_names=["Authorization"], sealed=b"\x01sealed-bytes\x00", timeout=30.0, rate=10,
                  created_at=100.0, updated_at=100.0, updated_by="admin")
    return McpServer(**{**fields, **changes})


async def test_a_server_added_reads_back_whole_at_version_one(store):
    added = await store.add_mcp_server(_jira())
    assert added.version == 1
    got = await store.get_mcp_server("jira")
    assert got == added
    assert (got.headers, got.header_refs, got.secret_names, got.sealed, got.rate) == (
        {"X-Team": "support"}, {"X-Token": "env:JIRA_TOKEN"}, ["Authorization"], b"\x01sealed-bytes\x00", 10)
    assert (got.disabled, got.allow_private) == (False, False)


async def test_a_second_server_of_one_name_is_refused(store):
    await store.add_mcp_server(_jira())
    with pytest.raises(Conflict, match="already an MCP server named jira"):
        await store.add_mcp_server(_jira())


async def test_a_change_on_the_version_read_lands_and_a_stale_one_is_refused(store):
    await store.add_mcp_server(_jira())
    changed = await store.put_mcp_server(_jira(disabled=True, rate=None, sealed=None, updated_at=200.0,
                                               run_as="mcp-user"), 1)
    assert (changed.version, changed.disabled, changed.rate, changed.sealed) == (2, True, None, None)
    assert changed.run_as == "mcp-user"
    with pytest.raises(Conflict, match="now version 2"):
        await store.put_mcp_server(_jira(), 1)
    with pytest.raises(StoreError, match="no MCP server named db"):
        await store.put_mcp_server(_jira(name="db"), 1)


async def test_servers_list_by_name_and_a_removed_one_is_gone(store):
    await store.add_mcp_server(_jira())
    await store.add_mcp_server(_jira(name="db", url="stdio:/usr/bin/db-mcp --read-only", run_as=""))
    assert [s.name for s in await store.list_mcp_servers()] == ["db", "jira"]
    assert (await store.get_mcp_server("db")).run_as == "" and (await store.get_mcp_server("jira")).run_as is None
    assert await store.delete_mcp_server("jira") is True
    assert await store.delete_mcp_server("jira") is False
    assert [s.name for s in await store.list_mcp_servers()] == ["db"]


async def test_a_level_keeps_its_tool_patterns_and_an_empty_list_apart_from_none(store):
    path = await store.ensure_project("Acme", "support", "desk")
    await store.put_limits(Limits("team", path.team.id, tools=["jira.*", "db.query"]))
    await store.put_limits(Limits("project", path.project.id, tools=[]))
    assert (await store.get_limits("team", path.team.id)).tools == ["jira.*", "db.query"]
    assert (await store.get_limits("project", path.project.id)).tools == []
    await store.put_limits(Limits("org", path.org.id, rpm=5))
    assert (await store.get_limits("org", path.org.id)).tools is None
