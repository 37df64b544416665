"""The cluster's own read-only MCP tools against a real control plane, a real agent and its sim engine.

One control plane for the module, in this process (tests/support/inprocess.py)
since the tools are answered in the plane's own process; a real `llmgw agent`
joined to it runs a sim model (`simmy`), and a second model (`marsy`) asks for
a label no node has, so that it waits unplaced. Each tool's answer is checked
for what a person would look for in it, and against what `llmgw ctl` says.
"""

from __future__ import annotations

import json

import pytest
import yaml
from mcp import types

from llmgw import __version__
from llmgw.mcp.cluster import ClusterTools
from tests.support.agents import AgentProcess
from tests.support.inprocess import PlaneThread
from tests.support.servers import Server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TOOL_NAMES = ["cluster_status", "list_nodes", "list_models", "list_replicas", "explain_placement", "node_logs"]


class Cluster:
    def __init__(self, server: Server, thread: PlaneThread, node: AgentProcess):
        self.server, self.thread, self.node = server, thread, node
        assert thread.plane is not None
        self.tools = ClusterTools(thread.plane)
        self.shard = ""

    def call(self, name: str, arguments: dict | None = None) -> dict:
        result = self.thread.run(self.tools.call(name, arguments or {}))
        types.CallToolResult.model_validate(result)  # the shape the MCP SDK reads
        return result

    def ok(self, name: str, arguments: dict | None = None) -> tuple[str, dict]:
        result = self.call(name, arguments)
        assert result["isError"] is False, result["content"][0]["text"]
        return result["content"][0]["text"], result["structuredContent"]

    def refused(self, name: str, arguments: dict | None = None) -> str:
        result = self.call(name, arguments)
        assert result["isError"] is True and "structuredContent" not in result, result
        return result["content"][0]["text"]


def _add_model(server: Server, root, doc: dict) -> None:
    path = root / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    done = server.ctl("ctl", "model", "add", "-f", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-tools")
    server = Server(root, "cp-a")
    done = server.init()
    assert done.returncode == 0, done.stderr
    thread = PlaneThread(server).start()
    node = AgentProcess(root, "node-a")
    try:
        wait_until(lambda: thread.plane and thread.plane.lease.leading, timeout=15, what="cp-a led")
        node.join(server).start()
        wait_until(lambda: [n for n in server.ctl_json("ctl", "nodes") if n["state"] == "ready"], timeout=30,
                   what=f"node-a was connected and ready:\n{node.output()[-3000:]}")
        _add_model(server, root, {"name": "simmy", "profiles": [{"engine": "sim", "cpu_cores": 1,
                                                                  "memory": "256MB"}]})
        _add_model(server, root, {"name": "marsy", "profiles": [{"engine": "sim", "memory": "256MB",
                                                                  "node_selector": {"zone": "mars"}}]})
        ready = wait_until(lambda: [r for r in server.ctl_json("ctl", "replicas", "--model", "simmy")
                                    if r["state"] == "ready"], timeout=60, interval=0.3,
                           what=f"simmy's replica was ready:\n{node.output()[-3000:]}")
        made = Cluster(server, thread, node)
        made.shard = ready[0]["id"]
        yield made
    finally:
        node.stop(stop_engines=True)
        thread.stop()


def test_the_tool_list_is_the_six_cluster_tools_each_declared_read_only(cluster):
    listed = cluster.tools.tools()

    assert [t["name"] for t in listed] == TOOL_NAMES
    for tool in listed:
        types.Tool.model_validate(tool)
        assert tool["annotations"]["readOnlyHint"] is True, tool["name"]
        assert tool["annotations"]["destructiveHint"] is False, tool["name"]
        assert tool["inputSchema"]["additionalProperties"] is False, tool["name"]
    required = {t["name"]: t["inputSchema"]["required"] for t in listed}
    assert required["explain_placement"] == ["model"] and required["node_logs"] == ["node"]


def test_calling_every_tool_changes_nothing_in_the_catalog_or_the_audit_log(cluster):
    before = (cluster.server.ctl_json("ctl", "audit", "--limit", "1000"), cluster.server.ctl_json("ctl", "models"))

    for name, arguments in [("cluster_status", {}), ("list_nodes", {}), ("list_models", {}),
                            ("list_replicas", {"model": "simmy", "include_stopped": True}),
                            ("explain_placement", {"model": "marsy"}), ("node_logs", {"node": "node-a"})]:
        cluster.ok(name, arguments)

    audit, models = cluster.server.ctl_json("ctl", "audit", "--limit", "1000"), cluster.server.ctl_json("ctl", "models")
    assert len(audit) == len(before[0])
    assert [(m["name"], m["version"], m["state"]) for m in models] == [
        (m["name"], m["version"], m["state"]) for m in before[1]]


def test_cluster_status_names_the_leader_the_node_each_model_against_what_it_wants_and_what_is_unhealthy(cluster):
    text, data = cluster.ok("cluster_status")

    assert "control plane:  cp-a (leader)" in text
    assert "nodes:          1, 1 ready" in text
    assert "simmy 1/1 ready (ready)" in text and "marsy 0/1 ready (waiting)" in text
    # The reason it waits, as its placement explanation gives it, not only that it does.
    assert ("  - model marsy has 0 of 1 replicas ready (waiting): fits on no node: node-a: labels: the profile wants "
            "zone=mars, the node has no zone label") in text
    assert data["answered_by"] == {"control_plane": "cp-a", "role": "leader", "leader": "cp-a"}
    assert data["store"]["up"] is True
    assert [(n["name"], n["state"]) for n in data["nodes"]] == [("node-a", "ready")]
    assert {m["name"]: (m["ready"], m["wanted"]) for m in data["models"]} == {"simmy": (1, 1), "marsy": (0, 1)}
    assert data["gpus"]["count"] == sum(len(n["gpus"]) for n in cluster.server.ctl_json("ctl", "nodes"))


def test_list_nodes_names_the_node_its_state_agent_version_and_engines(cluster):
    text, data = cluster.ok("list_nodes")

    header, row = text.splitlines()
    assert header.split() == ["NAME", "STATE", "GPUS", "GPU", "FREE", "LOAD", "AGENT", "ENGINES", "REPLICAS", "HEARD"]
    assert row.startswith("node-a  ready")
    assert __version__ in row and "sim " in row
    node = data["nodes"][0]
    assert (node["name"], node["id"], node["version"], node["replicas"]) == (
        "node-a", cluster.node.node_id, __version__, 1)
    assert "sim" in node["engines"]


def test_list_models_says_each_models_ready_against_wanted_and_its_profile(cluster):
    text, data = cluster.ok("list_models")

    rows = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert rows["simmy"].split()[1:3] == ["ready", "1/1"]
    assert rows["marsy"].split()[1:3] == ["waiting", "0/1"]
    assert "sim on 1 core, 256MB" in rows["simmy"] and "sim on shared cores, 256MB" in rows["marsy"]
    by_name = {m["name"]: m for m in data["models"]}
    assert (by_name["simmy"]["replicas"]["ready"], by_name["simmy"]["wanted"]) == (1, 1)
    assert data["models"] == [{**m, "wanted": by_name[m["name"]]["wanted"]}
                              for m in cluster.server.ctl_json("ctl", "models")]


def test_list_replicas_of_one_model_names_its_node_and_state(cluster):
    text, data = cluster.ok("list_replicas", {"model": "simmy"})

    assert [(r["id"], r["node"], r["state"]) for r in data["replicas"]] == [(cluster.shard, "node-a", "ready")]
    assert f"{cluster.shard}  simmy  node-a" in text
    assert cluster.ok("list_replicas", {"model": "marsy"})[0] == "no replicas of marsy are running"


def test_list_replicas_of_a_model_not_in_the_catalog_names_the_models_there_are(cluster):
    assert cluster.refused("list_replicas", {"model": "nope"}) == (
        "the catalog has no model named nope (the models: marsy, simmy)")


def test_explain_placement_says_node_by_node_why_a_model_is_not_placed(cluster):
    text, data = cluster.ok("explain_placement", {"model": "marsy"})

    assert text.splitlines()[0] == "marsy: waiting; wants 1, 0 running, 0 ready"
    node = data["nodes"][0]
    assert (node["name"], node["fits"]) == ("node-a", False)
    assert node["reasons"] and all("zone" in r for r in node["reasons"])
    row = next(line for line in text.splitlines() if line.startswith("node-a"))
    assert row.split()[1] == "refused" and node["reasons"][0] in row
    # The same explanation `ctl explain-placement` prints: the admin API's, not a second guess at it.
    said = cluster.server.ctl_json("ctl", "explain-placement", "marsy")
    assert {k: v for k, v in data.items() if k != "answered_by"} == said


def test_node_logs_gives_the_lines_the_engine_wrote_and_the_agents_own(cluster):
    text, data = cluster.ok("node_logs", {"node": "node-a", "source": cluster.shard, "lines": 50})

    assert "sim-engine simmy listening on http://" in text
    assert (data["node"], data["source"]) == ("node-a", cluster.shard)
    own, _ = cluster.ok("node_logs", {"node": "node-a"})
    assert "connected to the leader" in own


def test_node_logs_reads_only_what_the_agent_keeps_never_a_path(cluster):
    for path in ("/etc/passwd", "../../../../etc/passwd", "..", "r_1/../../etc/shadow"):
        said = cluster.refused("node_logs", {"node": "node-a", "source": path})
        assert said == (f'"source" is a shard\'s id as list_replicas shows it (like r_0123456789ab), not {path!r}: '
                        "node_logs reads only the lines the node's agent keeps, never a path")
        assert "root:" not in said
    # Shaped like a shard's id but not one: the node itself says it runs no such shard.
    assert cluster.refused("node_logs", {"node": "node-a", "source": "r_000000000000"}) == (
        f"node node-a runs no shard r_000000000000; its shards: {cluster.shard} (simmy, ready)")
    assert cluster.refused("node_logs", {"node": "node-a", "lines": 501}) == (
        '"lines" is a whole number from 1 to 500, not 501')


def test_an_unknown_tool_or_a_missing_argument_is_refused_with_what_to_do(cluster):
    assert cluster.refused("remove_model", {"model": "simmy"}) == (
        'there is no cluster tool "remove_model"; the tools are cluster_status, list_nodes, list_models, '
        "list_replicas, explain_placement and node_logs")
    assert cluster.refused("explain_placement") == (
        'explain_placement needs "model": a model\'s name or alias, as list_models shows it')
    assert cluster.refused("node_logs", {"source": cluster.shard}) == (
        'node_logs needs "node": a node\'s name or id, as list_nodes shows it')
    assert cluster.refused("list_nodes", {"verbose": True}) == "list_nodes takes no arguments, not 'verbose'"
    assert cluster.refused("list_replicas", {"model": 3}) == (
        '"model" is text: a model\'s name or alias, as list_models shows it')
    assert cluster.refused("node_logs", {"node": "node-z"}) == "there is no node node-z (the nodes: node-a)"


def test_a_standby_answers_from_the_store_and_sends_node_logs_to_the_leader(cluster, tmp_path):
    standby = PlaneThread(Server(tmp_path, "cp-b", store=cluster.server.store)).start()
    try:
        assert standby.plane is not None and not standby.plane.lease.leading
        tools = ClusterTools(standby.plane)

        nodes = standby.run(tools.call("list_nodes", {}))
        text = nodes["content"][0]["text"]
        assert text.splitlines()[0] == ("(answered by cp-b, a standby: from the store, as the leader (cp-a) last "
                                        "recorded the nodes from their heartbeats)")
        assert "node-a" in text
        assert nodes["structuredContent"]["answered_by"] == {"control_plane": "cp-b", "role": "standby",
                                                             "leader": "cp-a"}
        logs = standby.run(tools.call("node_logs", {"node": "node-a"}))
        assert logs["isError"] is True
        said = logs["content"][0]["text"]
        assert said.startswith("this control plane (cp-b) stands by and the nodes are connected to the leader only: "
                               "the leader is cp-a (")
        assert said.endswith("); run this there")
        assert json.loads(json.dumps(nodes)) == nodes  # the answer is JSON as it stands, for the gateway to send
    finally:
        standby.stop()
