"""`llmgw server add --vip` as an administrator runs it, checked by keepalived's own `keepalived -t`."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import stat
import subprocess

import pytest

from tests.support.servers import llmgw


def this_machines_network() -> tuple[str, ipaddress.IPv4Interface]:
    """An interface with an IPv4 network keepalived can use, and a free-looking address on it.

    keepalived refuses the loopback interface, and its check refuses an
    interface that is not here, so the test uses the machine's own. The
    address is never brought up: `keepalived -t` only reads the file.
    """
    links = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    for link in links:
        if link["ifname"] == "lo":
            continue
        for info in link.get("addr_info", []):
            held = ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}")
            if held.network.prefixlen <= 29:
                hosts = [h for h in (held.network.broadcast_address - 1, held.network.broadcast_address - 2)
                         if h != held.ip]
                return link["ifname"], ipaddress.ip_interface(f"{hosts[0]}/{held.network.prefixlen}")
    pytest.fail("this machine has no interface with an IPv4 network besides lo, which keepalived cannot use",
                pytrace=False)


def keepalived_check(path) -> subprocess.CompletedProcess:
    # Fail, never skip (as for PostgreSQL): CI installs keepalived and runs
    # as root, and a suite that skipped this would pass files keepalived refuses.
    if not shutil.which("keepalived"):
        pytest.fail("keepalived is not installed: apt-get install keepalived (`python3 build.py test` does, as root)",
                    pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("keepalived checks a configuration's scripts only as root; run this as root, as CI does",
                    pytrace=False)
    return subprocess.run(["keepalived", "-t", "-f", str(path)], capture_output=True, text=True, timeout=60)


def test_server_add_writes_a_configuration_keepalived_accepts_on_this_machines_own_interface(tmp_path):
    interface, vip = this_machines_network()
    conf = tmp_path / "keepalived.conf"
    done = llmgw("server", "add", "--vip", str(vip), "--keepalived-conf", str(conf),
                 "--listen-client", "127.0.0.1:18080")
    assert done.returncode == 0, done.stderr
    assert f"Wrote {conf}: the floating address {vip} on {interface}" in done.stdout
    assert "systemctl reload-or-restart keepalived" in done.stdout
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o644
    assert "http://127.0.0.1:18080/leader" in conf.read_text()

    checked = keepalived_check(conf)
    assert (checked.returncode, checked.stderr) == (0, "")


def test_every_control_plane_is_given_the_same_router_id_and_each_asks_its_own_leader(tmp_path):
    interface, vip = this_machines_network()
    answers = []
    for name, listen in (("cp1", "127.0.0.1:18080"), ("cp2", ":8080")):
        done = llmgw("server", "add", "--vip", str(vip), "--interface", interface, "--json",
                     "--keepalived-conf", str(tmp_path / name / "keepalived.conf"), "--listen-client", listen)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    assert answers[0]["virtual_router_id"] == answers[1]["virtual_router_id"]
    assert 1 <= answers[0]["virtual_router_id"] <= 255
    assert [a["check"] for a in answers] == ["http://127.0.0.1:18080/leader", "http://127.0.0.1:8080/leader"]
    assert all(a["written"] and a["interface"] == interface for a in answers)
    checked = keepalived_check(tmp_path / "cp2" / "keepalived.conf")
    assert (checked.returncode, checked.stderr) == (0, "")


def test_a_keepalived_conf_someone_else_wrote_is_kept_until_forced(tmp_path):
    interface, vip = this_machines_network()
    conf = tmp_path / "keepalived.conf"
    conf.write_text("vrrp_instance theirs {\n}\n")
    args = ("server", "add", "--vip", str(vip), "--interface", interface, "--keepalived-conf", str(conf))
    refused = llmgw(*args)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"llmgw: {conf} was not written by llmgw")
    assert "Traceback" not in refused.stderr
    assert conf.read_text() == "vrrp_instance theirs {\n}\n"
    assert llmgw(*args, "--force").returncode == 0
    assert "vrrp_instance llmgw" in conf.read_text()


def test_a_floating_address_without_its_prefix_length_is_refused_and_nothing_is_written(tmp_path):
    conf = tmp_path / "keepalived.conf"
    refused = llmgw("server", "add", "--vip", "10.0.0.160", "--keepalived-conf", str(conf))
    assert refused.returncode == 1
    assert refused.stderr == ("llmgw: the floating address '10.0.0.160' has no prefix length; write it like "
                              "10.0.0.160/24: the address, then its network's prefix length (keepalived adds "
                              "it to the interface with that network)\n")
    assert not conf.exists()
