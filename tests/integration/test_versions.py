"""Every machine's llmgw version, as `llmgw ctl status` shows it: the control planes and the nodes."""

from __future__ import annotations

from llmgw import __version__
from tests.support.agents import AgentProcess
from tests.support.waiting import wait_until


def test_ctl_status_shows_the_version_of_each_control_plane_and_each_node(server, tmp_path):
    agent = AgentProcess(tmp_path, "gpu-1").join(server).start()
    try:
        machines = wait_until(lambda: (m := server.ctl_json("ctl", "status")["machines"])["nodes"] and m, 60,
                              "the node gpu-1 was listed by ctl status")
        assert machines["control_planes"] == [
            {"name": "cp1", "address": f"127.0.0.1:{server.ports['agent']}", "version": __version__,
             "role": "leader", "started_ago_s": machines["control_planes"][0]["started_ago_s"]}]
        assert [(n["name"], n["version"]) for n in machines["nodes"]] == [("gpu-1", __version__)]
        shown = server.ctl("ctl", "status")
        assert shown.returncode == 0, shown.stderr
        rows = {line.split()[0]: line for line in shown.stdout.splitlines() if line.startswith(("cp1 ", "gpu-1 "))}
        assert "control plane (leader)" in rows["cp1"] and __version__ in rows["cp1"]
        assert "node" in rows["gpu-1"] and __version__ in rows["gpu-1"]
    finally:
        agent.stop()
