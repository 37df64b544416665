"""What `sudo llmgw` opens: the console on a control plane, the node's overview on a node, setup elsewhere."""

from __future__ import annotations

import pytest

from llmgw.console.dispatch import Choice, choose


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A machine with nothing installed: no $LLMGW_CONFIG, no token, run from outside any checkout."""
    for name in ("LLMGW_CONFIG", "LLMGW_TOKEN_FILE", "LLMGW_ADMIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    etc = tmp_path / "etc"
    return {"system_server": str(etc / "server.yaml"), "system_agent": str(etc / "agent.yaml")}


def test_a_machine_with_nothing_installed_opens_setup(bare):
    assert choose(**bare) == Choice("setup")


def test_a_machine_with_server_yaml_opens_the_console(bare, tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "server.yaml").write_text("{}\n")
    (tmp_path / "etc" / "agent.yaml").write_text("{}\n")  # a control plane that is a node too: the console

    assert choose(**bare) == Choice("console", bare["system_server"])


def test_a_machine_with_only_agent_yaml_opens_the_node_overview(bare, tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "agent.yaml").write_text("{}\n")

    assert choose(**bare) == Choice("node", bare["system_agent"])


def test_llmgw_config_in_the_environment_names_the_control_plane(bare, monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGW_CONFIG", str(tmp_path / "mine.yaml"))

    assert choose(**bare) == Choice("console", str(tmp_path / "mine.yaml"))


def test_a_checkouts_admin_token_opens_the_console(bare, tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin-token").write_text("t\n")

    assert choose(**bare).what == "console"


@pytest.mark.parametrize("flags,expected", [
    ({"admin": "127.0.0.1:1"}, Choice("console")),
    ({"token_file": "/x/admin-token"}, Choice("console")),
    ({"config": "/x/server.yaml"}, Choice("console", "/x/server.yaml")),
    ({"agent_config": "/x/agent.yaml"}, Choice("node", "/x/agent.yaml")),
])
def test_the_flags_choose_before_what_is_installed(bare, flags, expected):
    assert choose(**bare, **flags) == expected
