"""Rate limits that hold, against a real `llmgw server` with one process and with two workers (issue 10, item 7).

What the attacker did: a key with rpm 60 sent 200 requests at once (with
`workers: 2`, 120 got through in 0.22 s, 60 from each worker), and a client
that kept sending was let 80 through within 60 s (a second's requests left
the minute up to a second early). Both must now get the limit and no more.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.servers import Server, write_config

BODY = json.dumps({"model": "qwen", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 1}).encode()
RPM = 60

# Its minute is a client sending 20 requests a second for 70 s, mostly waiting: the scheduler does not count it
# among the heavy modules (tests/support/schedule.py).
pytestmark = pytest.mark.waits


@pytest.fixture
def limited(servers, tmp_path, engines):
    """limited(workers) -> (a running server in front of one sim-engine, a key of rpm 60 on it)."""

    def make(workers: int) -> tuple[Server, str]:
        engine = engines("qwen")
        config = write_config(tmp_path / f"gw{workers}.yaml",
                              {"models": [{"name": "qwen", "endpoints": [engine.url]}], "workers": workers})
        server = servers(f"gw{workers}", config=config)
        done = server.init("--json")
        assert done.returncode == 0, done.stderr
        server.start()
        made = server.ctl_json("keys", "create", "limited", "--project", "Demo/dev/app", "--create")
        server.ctl_json("keys", "limits", "--scope", "key", "--id", made["id"], "--rpm", str(RPM))
        return server, made["key"]

    return make


def ask(server: Server, key: str) -> tuple[int, str | None, str | None]:
    """One chat request on a connection of its own: (status, error code, the worker that answered)."""
    request = urllib.request.Request(server.client_url + "/v1/chat/completions", data=BODY, method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                              "Connection": "close"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            r.read()
            return r.status, None, r.headers.get("x-llmgw-worker")
    except urllib.error.HTTPError as e:
        code = (json.loads(e.read() or b"{}").get("error") or {}).get("code")
        return e.code, code, e.headers.get("x-llmgw-worker")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_burst_of_200_at_once_gets_the_minutes_60_and_not_60_a_worker(limited, workers):
    server, key = limited(workers)
    start = threading.Barrier(200)

    def one(_):
        start.wait()
        return ask(server, key)

    began = time.monotonic()
    with ThreadPoolExecutor(200) as pool:
        answers = list(pool.map(one, range(200)))
    took = time.monotonic() - began
    passed = [a for a in answers if a[0] == 200]
    by_worker = {w: sum(1 for a in passed if a[2] == w) for w in {a[2] for a in answers}}
    print(f"workers: {workers}: 200 at once, {len(passed)} answered in {took:.2f} s, by worker {by_worker}")
    assert {(status, code) for status, code, _ in answers if status != 200} == {(429, "rate_limited")}
    # The documented bound within one machine is none: the limit, however the burst falls on the workers.
    assert len(passed) == RPM
    if workers == 2:
        # Each worker was dealt more than the limit, so each alone could have let all 60 through.
        assert all(sum(1 for a in answers if a[2] == w) > RPM for w in by_worker), by_worker


@pytest.mark.slow
def test_a_client_that_keeps_sending_for_70_s_gets_no_more_than_60_in_any_60_s_with_one_worker_or_two(limited):
    # Both at once, each against a server of its own: 70 s of sending once, not twice (CI's time).
    made = [limited(workers) for workers in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda m: keep_sending(*m), made))
    for workers, (sent, passed, most) in zip((1, 2), results, strict=True):
        print(f"workers: {workers}: {sent} requests in 70 s, {passed} answered; the most in any 60 s: "
              f"at least {most}")
        assert most <= RPM, workers
        # The minute has room again once the first requests are a minute old: the limit twice over 70 s.
        assert passed >= 2 * RPM - 5, (workers, passed)


def keep_sending(server: Server, key: str) -> tuple[int, int, int]:
    """A request every 50 ms for 70 s: (how many were sent, how many answered, the most answered in any 60 s)."""
    sent: list[tuple[float, float, int]] = []  # (sent, answered, status) on the monotonic clock
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < 70:
        # Every 50 ms, starting at whatever fraction of a second this is: 20 requests in each second, so
        # a second's worth leaving the minute early would show as up to 20 too many.
        at = time.monotonic()
        status, code, _ = ask(server, key)
        sent.append((at, time.monotonic(), status))
        assert status == 200 or (status, code) == (429, "rate_limited")
        n += 1
        time.sleep(max(0.0, began + n * 0.05 - time.monotonic()))
    passed = [(at, done) for at, done, status in sent if status == 200]
    # The gateway counted each request somewhere between its sending and its answer. For a minute ending
    # with request j, request i is certainly inside it when i was sent less than 60 s before j was answered.
    most = max(sum(1 for at, _ in passed[:j + 1] if at > done_j - 60) for j, (_, done_j) in enumerate(passed))
    return len(sent), len(passed), most
