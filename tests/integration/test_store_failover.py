"""A gateway on a Patroni store whose primary's PostgreSQL is SIGKILLed: no request fails, no usage row is lost.

Real parts throughout: three etcd members and two PostgreSQL members under
Debian's Patroni, started from the files llmgw writes for the three-machine
store (tests/support/storemachines.py, llmgw/onboard/patroni.py: so the
timings measured are the product's), a real `llmgw server` on the address
it generates, listing both members with target_session_attrs=read-write, a sim-engine
behind a static model, and clients on loopback. The figures are printed
(run with -s to see them); what is asserted is what a user would see: every
request answered, every answered request's usage row in the store once.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import threading
import time

import pytest

from llmgw.onboard.patroni import BIN_DIR, LOOP_WAIT, RETRY_TIMEOUT, TTL
from tests.support.servers import Server, write_config
from tests.support.storemachines import StoreMachines, started

pytestmark = pytest.mark.slow  # etcd and PostgreSQL under Patroni

CLIENTS = 2
PACE = 0.02  # seconds between one client's requests: about 100 a second in all
MAX_REQUESTS = 20_000  # the clients' bound in count; the test's own deadline bounds their time
BODY = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "Say something."}],
                   "max_tokens": 1})


@pytest.fixture(scope="module")
def patroni():
    yield from started(postgres_on=2)


class Clients:
    """Threads that ask the gateway, one keep-alive connection each, until told to stop."""

    def __init__(self, server: Server, key: str) -> None:
        self.server, self.key = server, key
        self.answered: list[str] = []  # x-request-id of each 200
        self.failed: list[str] = []  # what each other answer was
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]

    def start(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.ports["client"], timeout=30)
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        while not self._stop.is_set():
            with self._lock:
                if len(self.answered) + len(self.failed) >= MAX_REQUESTS:
                    return
            try:
                conn.request("POST", "/v1/chat/completions", BODY, headers)
                r = conn.getresponse()
                body = r.read()
                outcome = (r.status, r.getheader("x-request-id"), body[:300])
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.server.ports["client"], timeout=30)
                outcome = (0, None, repr(e).encode())
            with self._lock:
                if outcome[0] == 200:
                    self.answered.append(outcome[1])
                else:
                    self.failed.append(f"{outcome[0]} {outcome[2].decode(errors='replace')}")
            time.sleep(PACE)
        conn.close()

    def count(self) -> int:
        with self._lock:
            return len(self.answered)


def _psql(cluster: StoreMachines, sql: str) -> str | None:
    """One query on whichever member takes writes now; None while none does."""
    done = subprocess.run(
        [os.path.join(BIN_DIR, "psql"), cluster.url + "&connect_timeout=2", "-Atc", sql],
        capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else None


def _store_up(server: Server) -> bool:
    """What `llmgw ctl status` reads: the admin API's status, its store answering."""
    import urllib.request

    token = open(server.token_file).read().strip()
    request = urllib.request.Request(f"http://{server.admin}/api/v1/status",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return bool(json.loads(r.read())["store"]["up"])
    except OSError:
        return False


def test_killing_the_primarys_postgresql_fails_no_request_and_loses_no_usage_row(patroni, servers, engines, tmp_path):
    engine = engines("sim")
    config = write_config(tmp_path / "gw.yaml", {"models": [{"name": "sim", "endpoints": [engine.url]}]})
    gw = servers("gw", store=patroni.url, config=config)
    made = gw.init("--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]["key"]
    gw.start()

    clients = Clients(gw, key).start()
    try:
        # Some rows written on the first primary before it dies.
        deadline = time.monotonic() + 30
        while clients.count() < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        rows_before = int(_psql(patroni, "SELECT count(*) FROM usage") or 0)
        assert rows_before > 0, gw.output()
        old = patroni.primary()
        assert old is not None

        killed_at = time.monotonic()
        patroni.kill_postgres(old)

        first_write = healthy = promoted_at = None
        deadline = killed_at + 90
        while (first_write is None or healthy is None) and time.monotonic() < deadline:
            new = patroni.primary()
            promoted = new is not None and new is not old
            if promoted and promoted_at is None:
                promoted_at = time.monotonic() - killed_at
            if first_write is None and promoted:
                # A row written after the kill, on the member that took over.
                now_rows = _psql(patroni, "SELECT count(*) FROM usage")
                if now_rows is not None and int(now_rows) > rows_before:
                    first_write = time.monotonic() - killed_at
            if healthy is None and promoted and _store_up(gw):
                healthy = time.monotonic() - killed_at
            time.sleep(0.2)
        # Rows from requests answered after the failover, too.
        settled = clients.count() + 100
        deadline = time.monotonic() + 30
        while clients.count() < settled and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        clients.stop()

    status = gw.ctl("ctl", "status")
    assert status.returncode == 0, status.stderr
    assert "store" in status.stdout and "NOT ANSWERING" not in status.stdout, status.stdout
    # Every row the writer holds reaches the new primary (it writes every 0.5 s).
    answered = set(clients.answered)
    stored: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ids = _psql(patroni, "SELECT id FROM usage")
        stored = set(ids.split()) if ids else set()
        if answered <= stored:
            break
        time.sleep(0.5)
    lost = answered - stored

    def seconds(value: float | None) -> str:
        return f"{value:.1f} s after the kill" if value is not None else "not within 90 s"

    print(f"\nPatroni failover (ttl {TTL}, loop_wait {LOOP_WAIT}, retry_timeout {RETRY_TIMEOUT}, "
          f"synchronous_mode, primary_start_timeout 0); the primary's PostgreSQL SIGKILLed under {CLIENTS} clients:\n"
          f"  client requests answered: {len(answered)}\n"
          f"  failed client requests: {len(clients.failed)}\n"
          f"  usage rows lost: {len(lost)} (of {len(answered)} answered; {len(stored)} rows in the store)\n"
          f"  the standby promoted by Patroni: {seconds(promoted_at)}\n"
          f"  first write on the new primary: {seconds(first_write)}\n"
          f"  ctl status shows the store up: {seconds(healthy)}")

    assert first_write is not None and healthy is not None, gw.output()[-3000:]
    # The outage is said in sentences in the server's log, never as a stack.
    assert "Traceback" not in gw.output(), gw.output()[-3000:]
    assert clients.failed == [], clients.failed[:5]
    assert lost == set(), f"{len(lost)} answered requests have no usage row, e.g. {sorted(lost)[:3]}"
    assert len(answered) == len(clients.answered)  # no request id answered twice


def test_a_leader_whose_store_stops_steps_down_and_keeps_answering_v1(servers, engines, tmp_path):
    from tests.support.pgcluster import PgCluster
    from tests.support.waiting import wait_for

    cluster = PgCluster()
    try:
        engine = engines("sim")
        config = write_config(tmp_path / "gw.yaml", {"models": [{"name": "sim", "endpoints": [engine.url]}],
                                                     "control": {"lease_ttl": "3s"}})
        gw = servers("gw", store=cluster.create_database(), config=config)
        made = gw.init("--json")
        assert made.returncode == 0, made.stderr
        key = json.loads(made.stdout)["key"]["key"]
        gw.start()
        assert wait_for(gw.leads, timeout=10)[0]
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

        def ask() -> int:
            conn = http.client.HTTPConnection("127.0.0.1", gw.ports["client"], timeout=10)
            try:
                conn.request("POST", "/v1/chat/completions", BODY, headers)
                return conn.getresponse().status
            finally:
                conn.close()

        # The key is read from the store once; from then on it is held in memory.
        assert ask() == 200
        cluster.stop()
        answers = []
        stepped_down = False
        deadline = time.monotonic() + 20
        while not stepped_down and time.monotonic() < deadline:
            answers.append(ask())
            stepped_down = not gw.leads()
            time.sleep(0.1)
        # Answered while its lease ran out, and after.
        answers += [ask() for _ in range(5)]
        cluster.start()

        assert stepped_down, gw.output()[-3000:]
        assert set(answers) == {200}, answers
        assert wait_for(gw.leads, timeout=20)[0], gw.output()[-3000:]
    finally:
        cluster.destroy()
