"""The audit log's "who" is who authenticated: the admin token's holder. What a request's headers
claim is recorded only from llmgw ctl on this machine, and only as a claim (issue 10, item 9)."""

from __future__ import annotations

import getpass
import json
import socket
import urllib.request

import pytest

from tests.support.servers import write_config


def this_machines_address() -> str | None:
    """An address of this machine that is not loopback, or None (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


@pytest.fixture
def gw(servers, tmp_path):
    """A control plane whose admin API listens on every interface, its token held by ada."""
    s = servers("gw", config=write_config(tmp_path / "server.yaml", {"admin_allow_remote": True}))
    loopback_args = s.args
    s.args = lambda: [a.replace(f"127.0.0.1:{s.ports['admin']}", f"0.0.0.0:{s.ports['admin']}")
                      for a in loopback_args()]
    done = s.init("--token-holder", "ada", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["token_holder"] == "ada"
    return s.start()


def create_key(host: str, server, name: str, headers: dict) -> int:
    token = open(server.token_file).read().strip()
    request = urllib.request.Request(
        f"http://{host}:{server.ports['admin']}/api/v1/keys", method="POST",
        data=json.dumps({"name": name, "project": "Default/default/default"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status


def audited(server, name: str) -> dict:
    entries = server.ctl_json("ctl", "audit", "--limit", "100")
    return next(e for e in entries if e["action"] == "key.create" and (e["after"] or {}).get("name") == name)


def test_a_forged_actor_from_another_machine_is_audited_as_the_tokens_holder(gw):
    address = this_machines_address()
    if address is None:
        pytest.skip("this machine has no address but loopback to call the admin API from")
    forged = {"X-Llmgw-Actor": "ceo", "X-Llmgw-Via": "cli"}
    assert create_key(address, gw, "from-afar", forged) == 201
    entry = audited(gw, "from-afar")
    assert (entry["actor"], entry["via"]) == ("ada", "api")


def test_a_forged_actor_without_the_clis_marker_is_audited_as_the_tokens_holder(gw):
    assert create_key("127.0.0.1", gw, "no-marker", {"X-Llmgw-Actor": "ceo", "X-Llmgw-Via": "portal"}) == 201
    entry = audited(gw, "no-marker")
    assert (entry["actor"], entry["via"]) == ("ada", "api")


def test_llmgw_ctl_on_this_machine_is_audited_as_the_holder_with_its_claim(gw):
    gw.ctl_json("keys", "create", "by-ctl", "--project", "Default/default/default")
    entry = audited(gw, "by-ctl")
    assert entry["actor"] == f"ada (claimed: {getpass.getuser()} via llmgw ctl)"
    assert entry["via"] == "cli"


def test_a_claim_cannot_pass_for_more_than_a_name(gw):
    sneaky = {"X-Llmgw-Actor": "bob) (claimed: root", "X-Llmgw-Via": "cli"}
    assert create_key("127.0.0.1", gw, "sneaky", sneaky) == 201
    assert audited(gw, "sneaky")["actor"] == "ada (claimed: bob???claimed??root via llmgw ctl)"
