"""Which address a request is counted against: the peer, or what trusted proxies say of it."""

from __future__ import annotations

from llmgw.router.clientaddr import TrustedProxies

BALANCERS = TrustedProxies(["10.0.0.0/8", "192.0.2.1"])


def test_a_peer_that_is_not_a_trusted_proxy_is_the_client_whatever_it_forwards():
    assert BALANCERS.client("203.0.113.5", ["198.51.100.1"]) == "203.0.113.5"


def test_behind_a_trusted_proxy_the_client_is_the_address_it_appended():
    assert BALANCERS.client("10.1.1.1", ["198.51.100.7"]) == "198.51.100.7"


def test_an_address_a_client_forged_is_left_of_the_balancers_and_never_reached():
    # The client sent "X-Forwarded-For: 198.51.100.99"; the balancer appended the real one.
    assert BALANCERS.client("10.1.1.1", ["198.51.100.99, 203.0.113.8"]) == "203.0.113.8"
    assert BALANCERS.client("10.1.1.1", ["198.51.100.99", "203.0.113.8"]) == "203.0.113.8"


def test_a_chain_of_trusted_proxies_is_walked_to_the_first_untrusted_address():
    assert BALANCERS.client("10.1.1.1", ["203.0.113.8, 192.0.2.1, 10.9.9.9"]) == "203.0.113.8"


def test_a_chain_of_only_trusted_proxies_counts_against_the_farthest_one():
    assert BALANCERS.client("10.1.1.1", ["10.2.2.2, 10.3.3.3"]) == "10.2.2.2"


def test_a_trusted_proxy_without_the_header_is_itself_the_client():
    assert BALANCERS.client("10.1.1.1", []) == "10.1.1.1"
    assert BALANCERS.client("10.1.1.1", [""]) == "10.1.1.1"


def test_a_malformed_header_falls_back_to_the_nearest_address_a_trusted_hop_vouched_for():
    assert BALANCERS.client("10.1.1.1", ["not an address"]) == "10.1.1.1"
    assert BALANCERS.client("10.1.1.1", ["198.51.100.1, 10.2.2.2, garbage"]) == "10.1.1.1"
    assert BALANCERS.client("10.1.1.1", ["garbage, 10.2.2.2"]) == "10.2.2.2"
    assert BALANCERS.client("10.1.1.1", ["x" * 10_000]) == "10.1.1.1"


def test_ports_brackets_and_ipv4_mapped_peers_are_read_as_the_address():
    assert BALANCERS.client("10.1.1.1", ["203.0.113.8:5123"]) == "203.0.113.8"
    assert BALANCERS.client("10.1.1.1", ["[2001:db8::7]:443"]) == "2001:db8::7"
    assert BALANCERS.client("::ffff:10.1.1.1", ["2001:db8::7"]) == "2001:db8::7"
    assert BALANCERS.client("::ffff:203.0.113.5", []) == "203.0.113.5"


def test_with_no_trusted_proxies_the_header_is_never_believed():
    assert TrustedProxies([]).client("127.0.0.1", ["203.0.113.8"]) == "127.0.0.1"


def test_a_peer_without_an_address_is_counted_under_a_placeholder():
    assert BALANCERS.client(None, ["203.0.113.8"]) == "-"
