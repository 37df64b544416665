"""Webhooks through a real `llmgw server`: added and tried with `llmgw ctl webhooks`, and events that reach a
receiver failing twice exactly once, signed, across a restart of the server on the same store.

One server for the module, with `notify.retry_first: 1s` so that retries come within seconds; the receiver is
aiohttp on loopback (tests/support/webhookreceiver.py), added with --allow-private since it is this machine.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter

import pytest

from tests.support.servers import Server, write_config
from tests.support.waiting import wait_until
from tests.support.webhookreceiver import Receiver, ReceiverThread, docs_verify

SECRET = "the-receivers-secret-7f3a"


@pytest.fixture(scope="module")
def receiver():
    with ReceiverThread(Receiver()) as got:
        yield got


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    root = tmp_path_factory.mktemp("webhooks")
    config = write_config(root / "gw.yaml", {"notify": {"retry_first": "1s", "send_every": "200ms"}})
    server = Server(root, "gw", config=config)
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    server.start()
    server.secret_file = root / "hook-secret"
    server.secret_file.write_text(SECRET + "\n")
    yield server
    server.stop()


def _status(server: Server, key: str) -> int:
    request = urllib.request.Request(server.client_url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_webhooks_are_added_tried_listed_and_removed_with_ctl_and_audited_without_the_secret(gateway, receiver):
    refused = gateway.ctl("ctl", "webhooks", "add", "http://169.254.169.254/latest/meta-data/")
    assert refused.returncode == 1
    assert "169.254.169.254 is a cloud metadata address; a webhook is not sent there" in refused.stderr
    refused = gateway.ctl("ctl", "webhooks", "add", receiver.url)  # loopback, without --allow-private
    assert refused.returncode == 1 and "this machine (loopback)" in refused.stderr

    hook = gateway.ctl_json("ctl", "webhooks", "add", receiver.url, "--allow-private", "--format", "slack",
                            "--events", "node_lost,budget_100", "--secret-file", str(gateway.secret_file))
    assert (hook["format"], hook["events"], hook["signed"]) == ("slack", ["node_lost", "budget_100"], True)
    listed = gateway.ctl("ctl", "webhooks", "list")
    assert hook["id"] in listed.stdout and "node_lost, budget_100" in listed.stdout

    before = len(receiver.got)
    tried = gateway.ctl("ctl", "webhooks", "test", hook["id"])
    assert tried.returncode == 0, tried.stderr
    assert f"{receiver.url} answered 200" in tried.stdout
    # The module's receiver also takes the other tests' deliveries, in whatever order they ran.
    [test] = [r for r in receiver.got[before:] if r.headers.get("X-Llmgw-Event") == "test"]
    assert test.headers["X-Llmgw-Event"] == "test" and test.doc == {
        "text": "llmgw: a test from llmgw: this webhook is reached"}
    assert docs_verify()(SECRET, test.headers["X-Llmgw-Timestamp"], test.body, test.headers["X-Llmgw-Signature"])
    [row] = gateway.ctl_json("ctl", "webhooks", "deliveries", hook["id"])
    assert (row["event"], row["state"], row["last_status"]) == ("test", "delivered", 200)

    removed = gateway.ctl("ctl", "webhooks", "remove", hook["id"])
    assert removed.returncode == 0 and hook["id"] in removed.stdout
    assert hook["id"] not in [h["id"] for h in gateway.ctl_json("ctl", "webhooks", "list")]
    missing = gateway.ctl("ctl", "webhooks", "test", hook["id"])
    assert missing.returncode == 1 and f"no webhook {hook['id']}" in missing.stderr

    audit = gateway.ctl_json("ctl", "audit", "--target", f"webhook:{hook['id']}")
    assert sorted(e["action"] for e in audit) == ["webhook.add", "webhook.remove"]
    assert SECRET not in json.dumps(audit) and SECRET not in gateway.output()
    receiver.got.clear()


def test_a_receiver_failing_twice_gets_each_event_once_signed_across_a_restart(gateway, receiver):
    receiver.failing = 2
    hook = gateway.ctl_json("ctl", "webhooks", "add", receiver.url, "--allow-private", "--secret-file",
                            str(gateway.secret_file), "--events", "key_revoked,key_expired,leader_changed")
    made = gateway.ctl_json("keys", "create", "ci", "--project", "Default/default/default")
    gateway.ctl_json("keys", "revoke", made["id"])
    wait_until(lambda: len(receiver.got) == 2, timeout=20, what="the revoked key's event was refused twice")
    assert receiver.taken() == []

    # Stopped while the third attempt waits (3 s after the second): it is in the store, and only there.
    gateway.stop()
    gateway.start()
    short = gateway.ctl_json("keys", "create", "short", "--project", "Default/default/default", "--ttl", "1s")
    wait_until(lambda: _status(gateway, short["key"]) == 401, timeout=20, what="the 1 s key expired")
    _status(gateway, short["key"])  # used again: told once still

    def kinds() -> Counter:
        return Counter(r.doc["kind"] for r in receiver.taken())

    wait_until(lambda: kinds() == Counter({"key_revoked": 1, "leader_changed": 1, "key_expired": 1}), timeout=30,
               what="the revoked key, the expired key and the new leader were each taken")
    verify = docs_verify()
    for got in receiver.got:
        h = got.headers
        assert verify(SECRET, h["X-Llmgw-Timestamp"], got.body, h["X-Llmgw-Signature"]), got.doc
        assert h["X-Llmgw-Event"] == got.doc["kind"] and h["X-Llmgw-Delivery"] == got.doc["id"]
    revoked = [r for r in receiver.got if r.doc["kind"] == "key_revoked"]
    # One delivery, tried three times by two processes: the same id each time, taken once.
    assert [r.status for r in revoked] == [503, 503, 200]
    assert len({r.headers["X-Llmgw-Delivery"] for r in revoked}) == 1
    assert revoked[0].doc["key_id"] == made["id"] and revoked[0].doc["key_name"] == "ci"
    assert Counter(r.headers["X-Llmgw-Delivery"] for r in receiver.taken()).most_common(1)[0][1] == 1
    assert [r.doc["leader"] for r in receiver.taken() if r.doc["kind"] == "leader_changed"] == ["gw"]

    rows = gateway.ctl_json("ctl", "webhooks", "deliveries", hook["id"])
    assert sorted((d["event"], d["state"], d["attempts"]) for d in rows) == [
        ("key_expired", "delivered", 1), ("key_revoked", "delivered", 3), ("leader_changed", "delivered", 1)]
