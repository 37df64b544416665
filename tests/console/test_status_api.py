"""What the console's Overview reads beyond `llmgw ctl status`: the control planes and the request counts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.support.waiting import wait_until


def test_status_lists_the_control_planes_with_the_leader_marked(server):
    wait_until(server.leads, 15, "cp1 leads")

    planes = wait_until(lambda: [p for p in server.ctl_json("ctl", "status")["control_planes"] if p["leads"]],
                        15, "a control plane marked as leading")

    assert [p["name"] for p in planes] == ["cp1"]
    assert planes[0]["agent_address"].startswith("127.0.0.1:")


def test_status_counts_client_requests_and_their_5xx_as_metrics_does(server):
    before = server.ctl_json("ctl", "status")["traffic"]
    request = urllib.request.Request(server.client_url + "/v1/chat/completions", method="POST",
                                     data=json.dumps({"model": "nothing-here", "messages": []}).encode(),
                                     headers={"Authorization": f"Bearer {server.first_key}",
                                              "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code < 500  # a request refused is counted, and is not an error of the service

    after = server.ctl_json("ctl", "status")["traffic"]

    assert after["requests"] == before["requests"] + 1
    assert after["errors"] == before["errors"] == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=5) as r:
        total = sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                    if line.startswith("llmgw_requests_total{"))
    assert total == after["requests"]
