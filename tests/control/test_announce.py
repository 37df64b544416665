"""The line `llmgw server` prints once it is up (issue 11, item 10)."""

from __future__ import annotations

from llmgw.control.announce import announcement


def test_a_server_bound_to_every_interface_prints_loopback_first_and_its_host_name_second():
    said = announcement("vm", ("0.0.0.0", 8080), "http://vm:8080", "127.0.0.1:9090")
    assert said.splitlines() == ["llmgw server vm is up: client API http://127.0.0.1:8080/v1, admin API 127.0.0.1:9090",
                                 "  from other machines: http://vm:8080/v1"]


def test_a_server_bound_to_one_address_prints_that_address_once():
    said = announcement("cp1", ("10.0.0.5", 8080), "http://10.0.0.5:8080", "127.0.0.1:9090")
    assert said == "llmgw server cp1 is up: client API http://10.0.0.5:8080/v1, admin API 127.0.0.1:9090"


def test_an_ipv6_wildcard_is_reached_on_ipv6_loopback_in_brackets():
    said = announcement("cp1", ("::", 8080), "https://llm.example.com", None)
    assert said.splitlines() == ["llmgw server cp1 is up: client API http://[::1]:8080/v1, admin API None",
                                 "  from other machines: https://llm.example.com/v1"]
