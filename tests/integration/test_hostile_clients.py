"""Clients that try to hurt the others (issue 10): made-up keys behind a proxy, slow and idle connections.

Each test does what the attacker did against a real `llmgw server` on
loopback and asserts that it failed, and that a well-behaved client beside
it was served. 127.0.0.2 is a second address on the same loopback, so one
machine plays a proxy, a client behind it and a client outside it.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.request

import pytest

from tests.support.servers import write_config
from tests.support.waiting import wait_for

PROXY, OUTSIDER = "127.0.0.1", "127.0.0.2"
ATTACKER, NEIGHBOUR = "203.0.113.66", "198.51.100.9"  # as the proxy names them in X-Forwarded-For
MADE_UP = "sk-llmgw-" + "0" * 43
READ_LIMIT = 60.0  # a socket read that outlasts this means the server never closed it; not a timing claim


@pytest.fixture
def gateway(servers, tmp_path):
    """gateway(**cluster) -> a running server with no models, its first key `.key`."""

    def make(name: str = "gw", **cluster) -> object:
        server = servers(name, config=write_config(tmp_path / f"{name}.yaml", cluster))
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.key = json.loads(done.stdout)["key"]["key"]
        return server.start()

    return make


def models(server, key: str, source: str = PROXY, forwarded: str | None = None) -> tuple[int, dict]:
    """GET /v1/models from `source`, as a proxy naming `forwarded` would send it."""
    connection = http.client.HTTPConnection("127.0.0.1", server.ports["client"], timeout=10,
                                            source_address=(source, 0))
    headers = {"Authorization": f"Bearer {key}"}
    if forwarded:
        headers["X-Forwarded-For"] = forwarded
    try:
        connection.request("GET", "/v1/models", headers=headers)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def closed_count(server, reason: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = re.search(rf'^llmgw_client_connections_closed_total\{{reason="{reason}"\}} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def test_made_up_keys_behind_a_trusted_proxy_lock_out_only_the_address_that_sent_them(gateway):
    gw = gateway(router={"trusted_proxies": [PROXY]}, auth={"unknown_key_rate": 20})
    statuses = [models(gw, MADE_UP, forwarded=ATTACKER)[0] for _ in range(25)]
    assert statuses == [401] * 20 + [429] * 5
    status, answer = models(gw, MADE_UP, forwarded=ATTACKER)
    assert answer["error"]["code"] == "too_many_unknown_keys" and ATTACKER in answer["error"]["message"]

    # Everyone else behind the same proxy is served as before.
    assert models(gw, gw.key, forwarded=NEIGHBOUR)[0] == 200
    assert models(gw, MADE_UP, forwarded=NEIGHBOUR)[0] == 401
    # A valid key is never refused by the throttle, even from the attacker's own address.
    status, answer = models(gw, gw.key, forwarded=ATTACKER)
    assert status == 200 and answer["object"] == "list"
    # The address a client wrote itself is left of the proxy's and never believed.
    assert models(gw, MADE_UP, forwarded=f"{NEIGHBOUR}, {ATTACKER}")[0] == 429


def test_a_client_that_is_not_a_trusted_proxy_cannot_forge_its_way_out_of_the_throttle(gateway):
    gw = gateway(router={"trusted_proxies": [PROXY]}, auth={"unknown_key_rate": 20})
    statuses = [models(gw, MADE_UP, source=OUTSIDER, forwarded=f"198.51.100.{i}")[0] for i in range(25)]
    assert statuses == [401] * 20 + [429] * 5  # counted against 127.0.0.2, whatever it claimed
    # The addresses it named were never counted: the proxy's clients by those names are untouched.
    assert models(gw, MADE_UP, forwarded="198.51.100.3")[0] == 401
    assert models(gw, gw.key, source=OUTSIDER)[0] == 200


def _half_headers(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
    return sock


def _trickled_body(port: int, key: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 100000\r\n\r\n{\"mo")
    return sock


def _idle_keep_alive(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    answer = b""
    while b'"ok"' not in answer:
        answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")
    return sock


def _read_to_the_end(sock: socket.socket, trickle: bool = False) -> bytes:
    """Everything the server sends until it closes; a trickle sends a byte a read meanwhile."""
    got = b""
    sock.settimeout(0.2 if trickle else READ_LIMIT)
    waited = 0.0
    while waited < READ_LIMIT:
        if trickle:
            try:
                sock.sendall(b"x")
            except OSError:
                pass  # closed under us: the read below says so
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            waited += 0.2
            continue
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError("the server kept the connection open")


@pytest.mark.parametrize("workers", [1, 2])
def test_slow_and_idle_connections_are_closed_and_counted_while_a_normal_client_is_served(gateway, workers):
    gw = gateway(workers=workers, router={"timeouts": {
        "client_headers": "1s", "client_idle": "1s", "client_body_rate": "1KB", "client_body_grace": "500ms"}})
    port = gw.ports["client"]
    half = [_half_headers(port) for _ in range(6)]
    idle = [_idle_keep_alive(port) for _ in range(6)]
    slow = [_trickled_body(port, gw.key) for _ in range(6)]

    # A normal client, meanwhile, is served.
    assert models(gw, gw.key)[0] == 200

    for sock in half + idle:
        assert _read_to_the_end(sock) == b""  # EOF, and not a byte of an answer
    for sock in slow:
        assert _read_to_the_end(sock, trickle=True) == b""
    for sock in half + idle + slow:
        sock.close()

    expected = {"header_timeout": 6, "idle": 6, "slow_body": 6}
    counted, _ = wait_for(lambda: {r: closed_count(gw, r) for r in expected} == expected and expected,
                          timeout=15, interval=0.3)
    assert counted == expected, {r: closed_count(gw, r) for r in expected}
    assert models(gw, gw.key)[0] == 200


def test_a_connection_over_the_per_address_cap_is_refused_while_another_address_is_served(gateway):
    gw = gateway(router={"max_connections_per_address": 3})
    port = gw.ports["client"]
    held = [socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT, source_address=(OUTSIDER, 0))
            for _ in range(3)]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT, source_address=(OUTSIDER, 0))
        refused = _read_to_the_end(extra)
        extra.close()
        head, _, body = refused.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429")
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_connections" and "max_connections_per_address" in error["message"]

        status, _ = models(gw, gw.key, source=PROXY)
        assert status == 200
        assert closed_count(gw, "over_cap") == 1
    finally:
        for sock in held:
            sock.close()
    # Their places are given back as they close.
    assert wait_for(lambda: models(gw, gw.key, source=OUTSIDER)[0] == 200, timeout=10)[0]
