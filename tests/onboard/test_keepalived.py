"""The floating address's keepalived configuration: the address checked, the router id derived, the file kept."""

from __future__ import annotations

import json
import os
import stat

import pytest

from llmgw.config.types import Address
from llmgw.onboard import keepalived
from llmgw.onboard.interfaces import check_interface, interface_toward
from llmgw.onboard.keepalived import FloatingAddress, FloatingAddressError, parse_vip, router_id


def test_every_control_plane_derives_the_same_router_id_from_the_address_whatever_prefix_it_was_given():
    assert router_id(parse_vip("10.0.0.160/24")) == router_id(parse_vip(" 10.0.0.160/16 "))
    # Pinned: an upgrade that changed the derivation would split a cluster
    # whose control planes are upgraded one at a time.
    assert router_id(parse_vip("10.0.0.160/24")) == 169


def test_router_ids_stay_within_vrrps_range_and_spread_over_it():
    ids = [router_id(parse_vip(f"10.0.{third}.{fourth}/16")) for third in range(4) for fourth in range(1, 255)]
    assert min(ids) >= 1 and max(ids) <= 255
    # Two clusters with different addresses on one network rarely share an id.
    assert len(set(ids)) > 200
    assert router_id(parse_vip("10.0.0.160/24")) != router_id(parse_vip("10.0.0.161/24"))


@pytest.mark.parametrize("written, said", [
    ("10.0.0.160", "has no prefix length; write it like 10.0.0.160/24"),
    ("ten.0.0.160/24", "is not a floating address; write one like 10.0.0.160/24"),
    ("10.0.0.160/33", "is not a floating address"),
    ("fd00::160/64", "is an IPv6 address"),
    ("127.0.0.160/8", "clients on the network could not reach it"),
    ("10.0.0.0/24", "is the network's own address of 10.0.0.0/24"),
    ("10.0.0.255/24", "is the broadcast address of 10.0.0.0/24"),
])
def test_a_floating_address_that_cannot_work_is_refused_with_what_to_write(written, said):
    with pytest.raises(FloatingAddressError) as refused:
        parse_vip(written)
    assert said in str(refused.value)


def test_a_priority_that_could_outrank_the_leader_is_refused():
    assert keepalived.check_priority(150) == 150
    with pytest.raises(FloatingAddressError, match="outside 100 to 150"):
        keepalived.check_priority(200)
    # Why the range: the widest spread of priorities stays below what the check adds.
    assert max(keepalived.PRIORITIES) - min(keepalived.PRIORITIES) < keepalived.WEIGHT


@pytest.mark.parametrize("listen, url", [
    (":8080", "http://127.0.0.1:8080/leader"),
    ("0.0.0.0:8080", "http://127.0.0.1:8080/leader"),
    ("10.0.0.5:8443", "http://10.0.0.5:8443/leader"),
    ("[::1]:8080", "http://[::1]:8080/leader"),
])
def test_keepalived_asks_leader_where_this_control_plane_serves_clients(listen, url):
    assert keepalived.leader_url(Address(listen)) == url


def test_the_configuration_holds_the_address_where_leader_answers_200():
    vip = parse_vip("10.0.0.160/24")
    text = keepalived.render(FloatingAddress(vip=vip, interface="eth0", check_url="http://127.0.0.1:8080/leader"))
    assert text.startswith(keepalived.MARK + "\n")
    assert 'script "/usr/bin/curl -fsS --max-time 2 -o /dev/null http://127.0.0.1:8080/leader"' in text
    assert "track_script {\n        llmgw_leader\n    }" in text
    assert "virtual_ipaddress {\n        10.0.0.160/24\n    }" in text
    assert f"virtual_router_id {router_id(vip)}\n" in text
    assert "interface eth0\n" in text and "state BACKUP\n" in text
    settings = [line.strip() for line in text.splitlines() if not line.strip().startswith("#")]
    # Preemption is what moves the address to a new leader.
    assert "nopreempt" not in settings
    assert f"weight {keepalived.WEIGHT}\n" in text
    # Nothing secret: the file can be read by anyone, as Debian leaves it.
    assert not any(line.startswith(("authentication", "auth_pass")) for line in settings)


def test_a_configuration_llmgw_wrote_is_replaced_and_anyone_elses_is_kept_unless_forced(tmp_path):
    path = str(tmp_path / "keepalived" / "keepalived.conf")
    first = keepalived.render(FloatingAddress(parse_vip("10.0.0.160/24"), "eth0", "http://127.0.0.1:8080/leader"))
    keepalived.write(path, first)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    second = first.replace("eth0", "eth1")
    keepalived.write(path, second)
    assert open(path).read() == second

    with open(path, "w") as f:
        f.write("vrrp_instance theirs {\n}\n")
    with pytest.raises(FloatingAddressError, match="was not written by llmgw.*--force"):
        keepalived.write(path, first)
    assert open(path).read() == "vrrp_instance theirs {\n}\n"
    keepalived.write(path, first, force=True)
    assert open(path).read() == first
    assert os.listdir(tmp_path / "keepalived") == ["keepalived.conf"]


def _ip(answers: dict[str, object]):
    """`ip -j …` as this machine would answer, by the command's words."""
    def run(args: list[str]) -> str:
        answer = answers[" ".join(args)]
        if isinstance(answer, Exception):
            raise answer
        return json.dumps(answer)
    return run


def test_the_interface_is_the_one_the_address_is_routed_through_directly():
    ip = _ip({"route get 10.0.0.160": [{"dst": "10.0.0.160", "dev": "eth1", "prefsrc": "10.0.0.5"}]})
    assert interface_toward(parse_vip("10.0.0.160/24"), ip) == "eth1"


def test_an_address_this_machine_already_holds_is_found_on_the_interface_holding_it():
    ip = _ip({
        "route get 10.0.0.160": [{"type": "local", "dst": "10.0.0.160", "dev": "lo"}],
        "-4 addr show": [
            {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
            {"ifname": "eth1", "addr_info": [{"family": "inet", "local": "10.0.0.5", "prefixlen": 24},
                                             {"family": "inet", "local": "10.0.0.160", "prefixlen": 24}]},
        ],
    })
    assert interface_toward(parse_vip("10.0.0.160/24"), ip) == "eth1"


def test_an_address_behind_a_gateway_is_refused_since_vrrp_reaches_only_this_network():
    ip = _ip({"route get 10.9.0.160": [{"dst": "10.9.0.160", "gateway": "192.0.2.1", "dev": "eth0"}]})
    with pytest.raises(FloatingAddressError) as refused:
        interface_toward(parse_vip("10.9.0.160/24"), ip)
    assert "through the gateway 192.0.2.1" in str(refused.value) and "--interface" in str(refused.value)


def test_no_route_at_all_is_said_with_what_to_do():
    ip = _ip({"route get 10.9.0.160": FloatingAddressError("RTNETLINK answers: Network is unreachable")})
    with pytest.raises(FloatingAddressError, match="no route toward 10.9.0.160 here .*Network is unreachable"):
        interface_toward(parse_vip("10.9.0.160/24"), ip)


def test_an_interface_named_by_hand_must_be_here_and_not_loopback():
    names = lambda: ["lo", "eth0"]  # noqa: E731
    assert check_interface("eth0", names) == "eth0"
    with pytest.raises(FloatingAddressError, match="there is no interface eth9 here; there are eth0, lo"):
        check_interface("eth9", names)
    with pytest.raises(FloatingAddressError, match="loopback"):
        check_interface("lo", names)

