"""An MCP server's or a webhook's URL that reaches this machine by a number's other spellings is refused where the
administrator types it (ctl, the admin API), naming the address it means, not only at the first connection."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.support.servers import Server

# Each reaches 127.0.0.1 (or 0.0.0.0) through getaddrinfo, which is what connects; none is an address to ipaddress.
SPELLINGS = {"127.1": "127.0.0.1", "2130706433": "127.0.0.1", "0x7f000001": "127.0.0.1",
             "0177.0.0.1": "127.0.0.1", "0": "0.0.0.0"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("typed"), "gw")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    yield server
    server.stop()


def admin_post(server: Server, path: str, doc: dict) -> tuple[int, dict]:
    token = open(server.token_file).read().strip()
    request = urllib.request.Request(f"http://{server.admin}{path}", method="POST", data=json.dumps(doc).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("host", SPELLINGS)
def test_an_mcp_server_at_another_spelling_of_loopback_is_refused_by_ctl_naming_the_address(gw, host):
    refused = gw.ctl("ctl", "mcp", "add", "sneaky", "--url", f"http://{host}:9090/mcp")
    assert refused.returncode == 1, refused.stdout
    assert f"{host} ({SPELLINGS[host]}) is this machine (loopback)" in refused.stderr
    assert "--allow-private" in refused.stderr
    assert gw.ctl_json("ctl", "mcp", "list") == []


@pytest.mark.parametrize("host", SPELLINGS)
def test_an_mcp_server_at_another_spelling_of_loopback_is_refused_by_the_admin_api(gw, host):
    status, doc = admin_post(gw, "/api/v1/mcp/servers", {"name": "sneaky", "url": f"http://{host}:9090/mcp"})
    assert status == 400, doc
    assert f"{host} ({SPELLINGS[host]}) is this machine (loopback)" in json.dumps(doc)


@pytest.mark.parametrize("host", SPELLINGS)
def test_a_webhook_at_another_spelling_of_loopback_is_refused_by_ctl_naming_the_address(gw, host):
    refused = gw.ctl("ctl", "webhooks", "add", f"http://{host}:9090/hook")
    assert refused.returncode == 1, refused.stdout
    assert f"{host} ({SPELLINGS[host]}) is this machine (loopback); a webhook is not sent there" in refused.stderr
    assert gw.ctl_json("ctl", "webhooks", "list") == []


@pytest.mark.parametrize("host", SPELLINGS)
def test_a_webhook_at_another_spelling_of_loopback_is_refused_by_the_admin_api(gw, host):
    status, doc = admin_post(gw, "/api/v1/webhooks", {"url": f"http://{host}:9090/hook"})
    assert status == 400, doc
    assert f"{host} ({SPELLINGS[host]}) is this machine (loopback)" in json.dumps(doc)


def test_the_metadata_address_in_octal_is_refused_as_the_metadata_address(gw):
    refused = gw.ctl("ctl", "webhooks", "add", "http://0251.0376.0251.0376/latest/meta-data/")
    assert refused.returncode == 1
    assert "0251.0376.0251.0376 (169.254.169.254) is a cloud metadata address" in refused.stderr


def test_a_private_network_address_in_shorthand_is_still_taken(gw):
    hook = gw.ctl_json("ctl", "webhooks", "add", "http://10.1:9/hook")
    assert hook["url"] == "http://10.1:9/hook"
    assert gw.ctl("ctl", "webhooks", "remove", hook["id"]).returncode == 0
