"""The administrator's cluster commands against real processes: `llmgw ctl logs` and `llmgw ctl restart`.

`llmgw server` on PostgreSQL, an `llmgw agent` joined to it, a sim model
placed on the node and answered through /v1 with the openai SDK.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from tests.support.agents import AgentProcess
from tests.support.waiting import wait_for, wait_until
from tests.test_grafana_dashboard import dashboard_metrics


@pytest.fixture
def cluster(servers, postgres_cluster, tmp_path):
    """A leader on PostgreSQL with one node, node-a, joined and connected (test_cluster.py's fixture, smaller)."""
    url = postgres_cluster.create_database()
    cp = servers("cp-a", store=url)
    assert cp.init().returncode == 0
    cp.start()
    wait_for(cp.leads, timeout=15)
    made = cp.ctl_json("keys", "create", "app", "--project", "Demo/dev/app", "--create")
    cp.key = made["key"]
    cp.openai = openai.OpenAI(api_key=made["key"], base_url=cp.client_url + "/v1", max_retries=0)
    cp.node = AgentProcess(tmp_path, "node-a").join(cp).start()
    connected, _ = wait_for(lambda: len(cp.ctl_json("ctl", "nodes")) == 1, timeout=30)
    assert connected, cp.output() + cp.node.output()
    yield cp
    cp.node.stop(stop_engines=True)


def _sim_model(cp, tmp_path: Path, name: str = "simmy") -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                 "memory": "256MB"}]}))
    done = cp.ctl("ctl", "model", "add", "-f", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    ready, _ = wait_for(lambda: _ready(cp, name), timeout=60, interval=0.5)
    assert ready, cp.output() + cp.node.output()
    answered, _ = wait_for(lambda: _answers(cp, name), timeout=20, interval=0.5)
    assert answered, cp.output()
    return ready[0]


def _ready(cp, model: str) -> list[dict]:
    return [r for r in cp.ctl_json("ctl", "replicas", "--model", model) if r["state"] == "ready"]


def _answers(cp, model: str) -> str | None:
    try:
        reply = cp.openai.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                                  max_tokens=8)
        return reply.choices[0].message.content or ""
    except (openai.APIError, openai.APIConnectionError):
        return None


def test_ctl_logs_shows_a_shards_engine_output_and_the_agents_own_lines(cluster, tmp_path):
    shard = _sim_model(cluster, tmp_path)["id"]

    done = cluster.ctl("ctl", "logs", "node-a", "--source", shard)
    assert done.returncode == 0, done.stderr
    assert "sim-engine simmy listening on http://" in done.stdout
    # Each line is the time it was written, then its text.
    line = next(x for x in done.stdout.splitlines() if "listening on" in x)
    assert line[:4].isdigit() and line[10] == " " and line[19:21] == "  "

    as_json = cluster.ctl_json("ctl", "logs", cluster.node.node_id, "--source", shard, "--lines", "1")
    assert (as_json["node"], as_json["source"], len(as_json["lines"])) == ("node-a", shard, 1)
    assert as_json["lines"][0]["at"] > 0

    own = cluster.ctl("ctl", "logs", "node-a")
    assert own.returncode == 0, own.stderr
    assert "connected to the leader" in own.stdout


def test_ctl_logs_refusals_are_sentences(cluster, tmp_path):
    shard = _sim_model(cluster, tmp_path)["id"]

    unknown = cluster.ctl("ctl", "logs", "node-a", "--source", "r_000000000000")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (f"llmgw: node node-a runs no shard r_000000000000; its shards: {shard} "
                                      "(simmy, ready)")
    nobody = cluster.ctl("ctl", "logs", "node-z")
    assert (nobody.returncode, nobody.stderr.strip()) == (1, "llmgw: there is no node node-z (the nodes: node-a)")
    too_many = cluster.ctl("ctl", "logs", "node-a", "--lines", "5001")
    assert (too_many.returncode, too_many.stderr.strip()) == (2, "llmgw: --lines must be from 1 to 5000, not 5001")

    cluster.node.stop(stop_engines=True)
    gone, _ = wait_for(lambda: cluster.ctl("ctl", "logs", "node-a").returncode == 1, timeout=15)
    assert gone
    left = cluster.ctl("ctl", "logs", "node-a", "--source", shard)
    assert left.returncode == 1
    assert left.stderr.startswith("llmgw: node node-a is not connected; last heard from ")
    assert left.stderr.rstrip().endswith("is its agent running? (systemctl status llmgw-agent on it)")


def test_ctl_restart_replaces_the_replica_while_the_model_keeps_answering(cluster, tmp_path):
    before = _sim_model(cluster, tmp_path)
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def ask():
        nonlocal answered
        while not stop.is_set():
            try:
                cluster.openai.chat.completions.create(model="simmy", max_tokens=8,
                                                       messages=[{"role": "user", "content": "Hello"}])
                answered += 1
            except (openai.APIError, openai.APIConnectionError) as e:
                failures.append(f"{time.strftime('%H:%M:%S')} {type(e).__name__}: {e}")
            time.sleep(0.05)

    poller = threading.Thread(target=ask, daemon=True)
    poller.start()
    try:
        done = cluster.ctl("ctl", "restart", "--model", "simmy")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[:2] == [
            "simmy: restarting 1 replica",
            "  its replica is replaced one at a time: each new one starts beside the old, which stops once the "
            "new one is ready, so the model keeps answering"]

        def replaced():
            replicas = cluster.ctl_json("ctl", "replicas", "--model", "simmy")
            live = [r for r in replicas if r["state"] not in ("stopped", "failed")]
            if len(live) == 1 and live[0]["state"] == "ready" and live[0]["id"] != before["id"]:
                return live[0]
            return None

        after, _ = wait_for(replaced, timeout=60, interval=0.5)
        assert after, cluster.output() + cluster.node.output()
        assert after["node"] == "node-a" and after["url"] != before["url"]
        # Requests keep being answered, by the new replica, once the old one has stopped.
        since = answered
        wait_until(lambda: answered >= since + 10 or failures, timeout=60,
                   what="ten more answers after the old replica stopped")
    finally:
        stop.set()
        poller.join(timeout=30)
    assert not failures, "\n".join(failures) + cluster.output()
    assert answered > 10

    audit = cluster.ctl_json("ctl", "audit", "--target", "model:simmy")
    assert [e["action"] for e in audit][0] == "model.restart"


def test_ctl_restart_refuses_a_stopped_or_unknown_model(cluster, tmp_path):
    path = tmp_path / "parked.yaml"
    path.write_text(yaml.safe_dump({"name": "parked", "stopped": True, "profiles": [{"engine": "sim"}]}))
    assert cluster.ctl("ctl", "model", "add", "-f", str(path)).returncode == 0
    stopped = cluster.ctl("ctl", "restart", "--model", "parked")
    assert (stopped.returncode, stopped.stderr.strip()) == (
        1, "llmgw: parked is stopped: it has no replica to restart (llmgw ctl model start parked runs it again)")
    unknown = cluster.ctl("ctl", "restart", "--model", "nope")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        1, "llmgw: the catalog has no model named nope (the models: parked)")
    usage = cluster.ctl("ctl", "restart")
    assert usage.returncode == 2


def test_a_standby_asked_for_logs_names_the_leader(servers, postgres_cluster):
    url = postgres_cluster.create_database()
    a, b = servers("cp-a", store=url), servers("cp-b", store=url)
    assert a.init().returncode == 0
    a.start()
    wait_for(a.leads, timeout=15)
    b.start()
    done = b.ctl("ctl", "logs", "node-a", "--source", "r_1")
    assert done.returncode == 1
    assert done.stderr.strip() == ("llmgw: this control plane (cp-b) stands by and the nodes are connected to the "
                                   f"leader only: the leader is cp-a ({a.client_url}); run this there")
    assert json.loads(b.ctl("ctl", "status", "--json").stdout)["role"] == "standby"


def test_prometheus_is_given_every_machine_once_and_the_leaders_nodes_and_replicas(cluster, tmp_path):
    metrics = f"http://127.0.0.1:{cluster.ports['metrics']}"
    # Server, node and PostgreSQL all run on this one machine: one target, three roles. Before the agent
    # told its address, the node was a second target under the machine's host name.
    with urllib.request.urlopen(metrics + "/prometheus/targets", timeout=10) as r:
        groups = json.loads(r.read())
    assert groups == [{"targets": ["127.0.0.1:9100"],
                       "labels": {"node": "cp-a", "llmgw_role": "control-plane,node,store"}}]

    _sim_model(cluster, tmp_path)
    with urllib.request.urlopen(metrics + "/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    for line in ('llmgw_nodes{state="connected"} 1.0', 'llmgw_nodes{state="lost"} 0.0',
                 'llmgw_node_up{node="node-a"} 1.0', 'llmgw_replicas{model="simmy",state="ready"} 1.0'):
        assert line in lines, "\n".join(x for x in lines if x.startswith(("llmgw_node", "llmgw_replicas")))

    # When its certificates run out, for the packaged alert: the agent port's, renewed 30 days before its end.
    expiry = {line.split('"')[1]: float(line.split()[-1]) for line in lines
              if line.startswith("llmgw_certificate_expiry_timestamp_seconds{")}
    assert set(expiry) == {"agent-port", "ca"} and expiry["ca"] >= expiry["agent-port"] > time.time() + 30 * 86400

    # Every metric the shipped Grafana dashboard asks for is one this server announces.
    announced = {x.split()[2] for x in lines if x.startswith("# TYPE ")}
    announced |= {x.split()[2] + "_bucket" for x in lines if x.startswith("# TYPE ") and x.endswith(" histogram")}
    missing = sorted(dashboard_metrics() - announced)
    assert not missing, f"the dashboard asks for metrics the server does not have: {missing}"
