"""Which addresses and headers a server may be registered with, said in a sentence when not."""

from __future__ import annotations

import pytest

from llmgw.mcp.servers import ServerError, check_url
from llmgw.mcp.stdio import command_of


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/mcp", "http://localhost/mcp", "http://169.254.169.254/",
                                 "http://metadata.google.internal/mcp", "http://[::1]:9/mcp"])
def test_a_url_on_this_machine_or_a_metadata_service_is_refused_unless_allowed(url):
    with pytest.raises(ServerError, match="--allow-private"):
        check_url(url, allow_private=False)
    assert check_url(url, allow_private=True) == url


def test_a_private_network_address_and_the_clusters_own_tools_are_taken():
    assert check_url("https://10.0.0.8/mcp", allow_private=False) == "https://10.0.0.8/mcp"
    assert check_url("llmgw:admin", allow_private=False) == "llmgw:admin"


@pytest.mark.parametrize("url", ["ftp://jira.example.com/mcp", "jira.example.com", "stdio:", "https:///mcp"])
def test_what_is_not_an_address_is_refused_naming_what_is(url):
    with pytest.raises(ServerError, match="http|command"):
        check_url(url, allow_private=False)


def test_a_stdio_command_line_is_split_as_a_shell_would():
    assert command_of("stdio:/opt/mcp/files --root '/srv/a share'") == ["/opt/mcp/files", "--root", "/srv/a share"]
