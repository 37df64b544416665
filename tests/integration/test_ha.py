"""Control planes that fail: a leader killed and started again, standbys that pass /v1 on or answer it
themselves (router.active_active), with real servers on PostgreSQL, an agent and its sim engine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.servers import Server
from tests.support.waiting import wait_for, wait_until

MODEL = "simmy"
CHAT = [{"role": "user", "content": "Hello there"}]


def _add_sim_model(cp: Server, tmp_path) -> None:
    path = tmp_path / f"{MODEL}.yaml"
    path.write_text(yaml.safe_dump({"name": MODEL, "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                  "memory": "256MB"}]}))
    done = cp.ctl("ctl", "model", "add", "-f", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    ready, _ = wait_for(lambda: [r for r in cp.ctl_json("ctl", "replicas", "--model", MODEL)
                                 if r["state"] == "ready"], timeout=60, interval=0.5)
    assert ready, cp.output()


def ask(cp: Server, key: str, stream: bool = False, timeout: float = 30) -> tuple[int | str, dict, bytes]:
    """One chat request on a connection of its own: (status or the connection's error, headers, body)."""
    body = json.dumps({"model": MODEL, "messages": CHAT, "max_tokens": 4, "stream": stream}).encode()
    request = urllib.request.Request(cp.client_url + "/v1/chat/completions", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                              "Connection": "close"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, ConnectionError) as e:
        return type(getattr(e, "reason", e)).__name__, {}, b""


def requests_counted(cp: Server) -> float:
    """What this control plane's own router answered for the model, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cp.ports['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    prefix = f'llmgw_requests_total{{api="chat",model="{MODEL}",status="200"}} '
    return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))


@pytest.fixture
def leader(servers, postgres_cluster, tmp_path):
    """A leader on PostgreSQL with one node serving the catalog model `simmy`; `.key` may use it."""
    url = postgres_cluster.create_database()
    cp = servers("cp-a", store=url)
    assert cp.init().returncode == 0
    cp.start()
    wait_for(cp.leads, timeout=15)
    cp.key = cp.ctl_json("keys", "create", "app", "--project", "Demo/dev/app", "--create")["key"]
    cp.url = url
    node = AgentProcess(tmp_path, "node-a").join(cp)
    node.start()
    wait_for(lambda: len(cp.ctl_json("ctl", "nodes")) == 1, timeout=30)
    _add_sim_model(cp, tmp_path)
    yield cp
    node.stop(stop_engines=True)


@pytest.fixture
def pair(leader, servers):
    """The leader and a standby on the same store, holding the cluster's master key as every control plane does."""
    standby = servers("cp-b", store=leader.url)
    shutil.copy(leader.data_dir / "master-key", standby.data_dir / "master-key")
    os.chmod(standby.data_dir / "master-key", 0o600)
    standby.start()
    return leader, standby


def test_a_leader_killed_and_started_again_answers_its_catalog_model_from_its_first_health(leader):
    leader.signal(signal.SIGKILL)
    leader.proc.wait(timeout=10)
    leader.start(wait=False)
    healthy, _ = wait_for(lambda: leader.get("/health")[0] == 200, timeout=30, interval=0.02)
    assert healthy, leader.output()
    began = time.monotonic()
    # The replica ran on through the restart: known from the store and probed before the port serves,
    # so the very first request is answered, though the agent has not found the new process yet.
    status, _, body = ask(leader, leader.key)
    took = time.monotonic() - began
    assert status == 200, body
    print(f"first answer {took * 1000:.0f} ms after the restarted leader's first /health")
    assert "took back the lease from this control plane's previous run" in leader.output()
    assert leader.leads()


def test_a_catalog_model_with_no_replica_is_refused_with_503_and_when_to_try_again_never_404(leader, tmp_path):
    path = tmp_path / "nowhere.yaml"
    # Needs more memory than the node has: in the catalog, never placed.
    path.write_text(yaml.safe_dump({"name": "nowhere", "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                       "memory": "100000GB"}]}))
    assert leader.ctl("ctl", "model", "add", "-f", str(path)).returncode == 0
    sdk = openai.OpenAI(api_key=leader.key, base_url=leader.client_url + "/v1", max_retries=0)
    listed, _ = wait_for(lambda: "nowhere" in [m.id for m in sdk.models.list()], timeout=10)
    assert listed
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.chat.completions.create(model="nowhere", messages=CHAT, max_tokens=4)
    assert refused.value.status_code == 503
    assert refused.value.response.headers["Retry-After"]
    assert "nowhere has no replica ready" in refused.value.message


def test_a_standby_passes_v1_to_the_leader_which_answers_and_records_it(pair):
    a, b = pair
    assert a.leads() and not b.leads()
    status, headers, body = ask(b, a.key)
    assert status == 200, body
    # The leader's router answered it; the standby's router saw nothing.
    assert requests_counted(a) == 1 and requests_counted(b) == 0
    sdk = openai.OpenAI(api_key=a.key, base_url=b.client_url + "/v1", max_retries=0)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in
                   sdk.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, stream=True)
                   if chunk.choices)
    assert text
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="llmgw-" + "x" * 40, base_url=b.client_url + "/v1", max_retries=0).models.list()


def test_a_standby_whose_leader_is_gone_says_503_and_when_to_try_again_until_it_leads(pair):
    a, b = pair
    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, headers, body = ask(b, a.key)
        seen.append(status)
        if status == 200:
            break
        assert status == 503, body
        assert headers.get("Retry-After")
        assert json.loads(body)["error"]["code"] in ("leader_unreachable", "no_leader", "no_replica")
        time.sleep(0.5)
    assert seen[-1] == 200, (seen, b.output())
    assert b.leads()


def _active_active(a: Server, b: Server) -> None:
    a.ctl_json("ctl", "config", "set", "router.active_active", "true")
    following, _ = wait_for(lambda: "this control plane answers /v1 itself" in b.output(), timeout=20)
    assert following, b.output()


def test_an_active_active_standby_answers_and_records_requests_itself(pair):
    a, b = pair
    _active_active(a, b)
    status, _, body = ask(b, a.key)
    assert status == 200, body
    assert requests_counted(b) == 1 and requests_counted(a) == 0
    rows, _ = wait_for(lambda: [r for r in a.ctl_json("ctl", "usage", "--by", "model")["rows"]
                                if r["group"] == MODEL], timeout=10)
    assert rows and rows[0]["requests"] == 1


def test_when_the_leader_is_killed_under_load_a_client_that_retries_on_the_standby_loses_nothing(pair):
    a, b = pair
    _active_active(a, b)
    answered: list[str] = []
    lost: list[str] = []
    by_standby: list[float] = []  # when the standby answered, on the monotonic clock
    stop = threading.Event()

    def client(first: Server, second: Server) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            tried_until = time.monotonic() + 15
            ok = False
            while time.monotonic() < tried_until and not ok:
                for cp in (first, second):
                    status, _, _ = ask(cp, a.key, timeout=10)
                    if status == 200:
                        ok = True
                        if cp is b:
                            by_standby.append(time.monotonic())
                        break
                if not ok:
                    time.sleep(0.2)
            (answered if ok else lost).append(f"{first.name}#{n}")

    clients = [threading.Thread(target=client, args=order) for order in ((a, b), (b, a))]
    for t in clients:
        t.start()
    wait_until(lambda: len(answered) >= 10 or lost, timeout=60, what="ten answers before the leader was killed")
    a.signal(signal.SIGKILL)
    killed = time.monotonic()
    led, took = wait_for(b.leads, timeout=30, interval=0.2)
    since = len(answered)
    wait_until(lambda: len(answered) >= since + 10 or lost, timeout=60,
               what="ten more answers once the standby led")
    stop.set()
    for t in clients:
        t.join(timeout=60)
    print(f"{len(answered)} requests answered, {len(lost)} lost; the standby led {took:.1f} s after the kill")
    assert led, b.output()
    assert not lost
    assert len(answered) > 10
    # Between the kill and its lead the standby answered on its own, from the replicas it follows:
    # passing /v1 on, it would have had nobody to pass to.
    assert [t for t in by_standby if killed + 1 < t < killed + took - 1], (took, len(by_standby))


def test_an_active_active_standby_with_workers_routes_the_catalog_on_every_worker(leader, servers, tmp_path):
    from tests.support.servers import write_config

    config = write_config(tmp_path / "cp-b.yaml", {"workers": 2})
    b = servers("cp-b", store=leader.url, config=config)
    shutil.copy(leader.data_dir / "master-key", b.data_dir / "master-key")
    os.chmod(b.data_dir / "master-key", 0o600)
    b.start()
    _active_active(leader, b)
    answers = [ask(b, leader.key) for _ in range(30)]
    assert {status for status, _, _ in answers} == {200}
    assert len({headers.get("x-llmgw-worker") for _, headers, _ in answers}) == 2
    counted, _ = wait_for(lambda: requests_counted(b) == 30, timeout=5)
    assert counted and requests_counted(leader) == 0, b.output()[-4000:]
