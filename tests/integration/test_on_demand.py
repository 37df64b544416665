"""On-demand models as a client meets them: nothing runs until a request asks, the request waits (saying so) while
one loads, an idle one gives its room to another asked for, and a stopped one is refused at once."""

from __future__ import annotations

import time

import openai
import psutil
from test_cluster import _model, _replicas, cluster  # noqa: F401 - the fixture, shared

from tests.support.waiting import wait_for, wait_until

MB = 1024 * 1024


def _on_demand(cp, tmp_path, name: str, memory: str = "256MB") -> None:
    _model(cp, {"name": name, "profiles": [{"engine": "sim", "cpu_cores": 1, "memory": memory}],
                "scaling": {"min": 0, "on_demand": {"evict_after_idle": "1s", "min_lifetime": "1s"}}}, tmp_path)


def _live(cp, model: str) -> list[dict]:
    return [r for r in _replicas(cp, model) if r["state"] in ("pending", "starting", "ready")]


def _listed(cp) -> set[str]:
    """The models the router lists: a reconcile pass hands it the catalog's, on-demand ones included."""
    return {m.id for m in cp.openai.models.list()}


def _ask(cp, model: str, **extra):
    return cp.openai.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Hello there"}], max_tokens=16, **extra)


def test_an_on_demand_model_loads_when_first_asked_and_a_streamed_request_waits_told_so(cluster, tmp_path):
    cluster.agent("node-a")
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    _on_demand(cluster, tmp_path, "sketch")
    wait_until(lambda: "sketch" in _listed(cluster), timeout=15, what="a reconcile pass handed sketch to the router")
    assert _live(cluster, "sketch") == []  # that pass placed nothing: nothing has asked

    raw = _ask(cluster, "sketch", stream=True)
    assert raw.headers["x-llmgw-loading"] == "sketch"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    assert text.strip(), cluster.output()
    assert [r["state"] for r in _replicas(cluster, "sketch")] == ["ready"]
    # Once loaded it answers straight away: nothing to wait for, no header.
    again = _ask(cluster, "sketch")
    assert "x-llmgw-loading" not in again.headers and again.parse().choices[0].message.content


def test_an_idle_on_demand_model_gives_its_room_to_another_asked_for(cluster, tmp_path):
    # Each takes 60% of this machine's memory: the node has room for one of them, not both.
    share = f"{int(psutil.virtual_memory().total * 0.6) // MB}MB"
    cluster.agent("node-a")
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    _on_demand(cluster, tmp_path, "picture", share)
    _on_demand(cluster, tmp_path, "mesh", share)
    wait_until(lambda: {"picture", "mesh"} <= _listed(cluster), timeout=15,
               what="a reconcile pass handed picture and mesh to the router")

    first = _ask(cluster, "picture")
    assert first.headers["x-llmgw-loading"] == "picture" and first.parse().choices[0].message.content
    # Time passing is the behaviour here: picture must be past its min_lifetime (1s) and evict_after_idle (1s)
    # before mesh asks, and no event says so.
    time.sleep(3)

    second = _ask(cluster, "mesh")
    assert second.headers["x-llmgw-loading"] == "mesh" and second.parse().choices[0].message.content
    assert [r["state"] for r in _live(cluster, "mesh")] == ["ready"]
    assert _live(cluster, "picture") == []
    stopped = [r for r in _replicas(cluster, "picture") if r["desired"] == "stop"]
    assert stopped and "evicted after" in stopped[0]["message"] and "for mesh" in stopped[0]["message"]


def test_a_stopped_on_demand_model_is_refused_at_once_saying_so(cluster, tmp_path):
    cluster.agent("node-a")
    wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
    _on_demand(cluster, tmp_path, "sketch")
    done = cluster.ctl("ctl", "model", "stop", "sketch")
    assert done.returncode == 0, done.stdout + done.stderr
    quick = cluster.openai.with_options(timeout=10)

    def refused():
        try:
            quick.chat.completions.create(model="sketch", messages=[{"role": "user", "content": "hi"}])
        except openai.APIStatusError as e:
            return e if "stopped" in str(e.message) else None
        return None

    # Once a reconcile pass has told the router (every 2 s).
    error, _ = wait_for(refused, timeout=15, interval=0.5)
    assert error is not None, cluster.output()
    assert error.status_code == 503
    assert error.body["message"] == (
        "sketch is stopped by an administrator and takes no requests until it is started again")
    assert _live(cluster, "sketch") == []
