"""The console's Overview and Models against a real control plane, agent and sim model, in a real terminal."""

from __future__ import annotations

import re

import openai
import yaml

from tests.support.agents import AgentProcess
from tests.support.waiting import wait_until


def _console(terminal, server):
    return terminal().start("console", "--admin", server.admin, "--admin-token-file", server.token_file)


def test_the_overview_shows_a_replica_go_from_starting_to_ready(server, terminal, capture, tmp_path,
                                                                checkout_python):
    node = AgentProcess(tmp_path, "node-a").join(server).start(python=checkout_python)
    try:
        wait_until(lambda: server.ctl_json("ctl", "nodes"), 30, "node-a connected")
        screen = _console(terminal, server)
        screen.wait_for("Control planes", "leads", "cp1 (this one)", "node-a", "Store  up")
        model = tmp_path / "slow.yaml"
        # The sim answers /health with 503 for its first seconds, as an engine loading weights does.
        model.write_text(yaml.safe_dump({"name": "slow", "profiles": [
            {"engine": "sim", "cpu_cores": 1, "memory": "256MB", "args": ["--load-seconds", "6"]}]}))
        assert server.ctl("ctl", "model", "add", "-f", str(model)).returncode == 0

        starting = screen.wait_for("slow", "starting", timeout=60)
        replica = wait_until(lambda: server.ctl_json("ctl", "replicas", "--model", "slow"), 30, "a replica")[0]
        assert replica["id"] in starting
        capture(screen, "overview-starting")
        ready = screen.wait_for(f"ready     {replica['id']} on node-a", "1/1 ready", timeout=60)
        assert "requests a second" in ready and "errors a second" in ready

        # Requests answered show as a rate between two refreshes, from /api/v1/status's counts.
        client = openai.OpenAI(api_key=server.first_key, base_url=server.client_url + "/v1", max_retries=0)
        for _ in range(3):
            client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "Hello"}],
                                           max_tokens=4)
        wait_until(lambda: re.search(r"Traffic  (?!0\.0 )[0-9.]+ requests a second", screen.screen()), 30,
                   "a rate above zero on the Traffic line")
        capture(screen, "overview")

        screen.keys("3")
        nodes = screen.wait_for("node-a", "no GPUs: CPU models only", "1 replicas", "engines: ")
        assert "sim " in nodes and "llmgw ctl nodes" in nodes
        capture(screen, "nodes")
    finally:
        node.stop(stop_engines=True)


def test_a_model_is_served_scaled_and_stopped_from_the_models_screen(server, terminal, capture, tmp_path):
    screen = _console(terminal, server)
    screen.wait_for("Overview")
    screen.keys("2")
    screen.wait_for("No models yet")
    screen.keys("v")
    screen.wait_for("Serve weights", "source")
    screen.type("/nowhere/tiny.gguf")
    screen.keys("Enter", "Enter")
    screen.type("tiny")
    screen.keys("F2")
    screen.wait_for("tiny", "version 1", timeout=30)
    assert server.ctl_json("ctl", "model", "show", "tiny")["source"] == "/nowhere/tiny.gguf"

    screen.keys("s")
    screen.wait_for("Scale tiny", "at least")
    screen.type("0")
    screen.keys("F2")
    screen.wait_for("tiny: ", "version 2", timeout=30)
    assert server.ctl_json("ctl", "model", "show", "tiny")["scaling"]["min"] == 0

    screen.keys("t")
    screen.wait_for("tiny: stopped", timeout=30)
    capture(screen, "models")
    assert server.ctl_json("ctl", "model", "show", "tiny")["state"] == "stopped"
    # The audit log says the changes came through the console.
    scaled = next(e for e in server.ctl_json("ctl", "audit", "--target", "model:tiny") if e["action"] == "model.scale")
    assert scaled["via"] == "console" and scaled["actor"].endswith(" via the console)")
    # The shell command that does the same is on every screen.
    assert "llmgw ctl model add|serve|scale|stop|start" in screen.screen()


def test_a_refused_action_is_one_sentence_on_the_screen(server, terminal):
    screen = _console(terminal, server)
    screen.wait_for("Overview")
    screen.keys("2")
    screen.wait_for("No models yet")
    screen.keys("a")
    screen.wait_for("Add a model from a model file")
    screen.type("/nowhere/model.yaml")
    screen.keys("Enter")
    shown = screen.wait_for("/nowhere/model.yaml: no such file or directory")
    assert "Traceback" not in shown


def test_without_a_terminal_the_console_says_so_in_one_sentence(server):
    from tests.support.servers import llmgw

    done = llmgw("console", "--admin", server.admin, "--admin-token-file", server.token_file)

    assert done.returncode == 1
    assert done.stderr.startswith("llmgw: the console needs a terminal;") and "Traceback" not in done.stderr


def test_a_control_plane_that_stops_answering_is_one_sentence_and_the_console_keeps_running(server, terminal):
    screen = _console(terminal, server)
    screen.wait_for("Control planes", "leads")

    server.stop()

    shown = screen.wait_for(f"no llmgw server answers at {server.admin}; is it running?")
    assert "Traceback" not in shown and "[exited" not in shown
    screen.keys("2")  # another screen says the same, and the keys still work
    screen.wait_for("Models", f"no llmgw server answers at {server.admin}")


def test_two_control_planes_are_listed_with_the_one_that_leads_and_a_handover_is_seen(servers, postgres_cluster,
                                                                                     terminal):
    url = postgres_cluster.create_database()
    a, b = servers("cp-a", store=url), servers("cp-b", store=url)
    assert a.init().returncode == 0
    a.start()
    wait_until(a.leads, 15, "cp-a leads")
    b.start()
    screen = terminal().start("console", "--admin", b.admin, "--admin-token-file", b.token_file)

    # Seen from the standby: the store's list of control planes, the leader marked.
    screen.wait_for("leads    cp-a", "standby  cp-b (this one)")

    assert a.stop() == 0  # hands the lease over at once
    screen.wait_for("leads    cp-b (this one)", "standby  cp-a", timeout=60)
