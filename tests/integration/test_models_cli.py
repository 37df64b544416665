"""`llmgw ctl models`, `model …`, `nodes`, `replicas` and `explain-placement` against a real `llmgw server`."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llmgw.protocol import Heartbeat, Host, Register, to_dict
from llmgw.store import NodeRecord, Replica, open_store

MODEL = """
name: qwen
aliases: [qwen-chat]
source: /models/qwen2.5-0.5b-instruct-q4_k_m.gguf
context_length: 4096
kv_bytes_per_token: 131072
profiles:
  - engine: llamacpp
    cpu_cores: 2
    memory: 6GB
scaling: {min: 1, max: 2}
"""


def write(tmp_path, text: str, name: str = "qwen.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def put_node(server, name: str, memory_gb: int) -> None:
    """A node as the leader records it when its agent registers (the agent's side is tested elsewhere)."""
    async def put():
        store = await open_store(server.store)
        now = time.time()
        register = Register(node_id=f"id-{name}", name=name, version="test", engines={"llamacpp": "b6000"},
                            host=Host(hostname=name, cpu_cores=4, cpu_threads=4, memory_mb=memory_gb * 1024))
        await store.put_node(NodeRecord(f"id-{name}", name, to_dict(register), heartbeat=to_dict(Heartbeat(at=now)),
                                        heartbeat_at=now + 3600, state="connected", first_seen=now, updated_at=now))
        await store.close()

    asyncio.run(put())


def test_a_model_file_is_added_listed_scaled_stopped_and_audited(server, tmp_path):
    added = server.ctl_json("ctl", "model", "add", "-f", write(tmp_path, MODEL))
    assert added["model"]["name"] == "qwen" and added["model"]["version"] == 1
    table = server.ctl("ctl", "models")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["NAME", "STATE", "REPLICAS", "ENGINE", "CONTEXT", "SOURCE"]
    assert "qwen  waiting  0/1-2" in table.stdout

    scaled = server.ctl_json("ctl", "model", "scale", "qwen", "--min", "2", "--max", "3")
    assert scaled["model"]["scaling"] == {"min": 2, "max": 3, "on_demand": False}
    stopped = server.ctl("ctl", "model", "stop", "qwen-chat")
    assert stopped.returncode == 0 and stopped.stdout.startswith("qwen: stopped, version 3")
    audit = server.ctl_json("ctl", "audit", "--target", "model:qwen")
    assert [e["action"] for e in audit] == ["model.stop", "model.scale", "model.add"]
    assert all(e["actor"] and e["via"] == "cli" for e in audit)

    # usage mistakes exit 2, refusals 1 with a sentence
    assert server.ctl("ctl", "model", "scale", "qwen").returncode == 2
    assert server.ctl("ctl", "model", "gpus", "qwen").returncode == 2
    missing = server.ctl("ctl", "model", "stop", "llama")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "llmgw: the catalog has no model named llama (the models: qwen)"
    cpu = server.ctl("ctl", "model", "gpus", "qwen", "2")
    assert cpu.returncode == 1 and "qwen runs on CPUs only" in cpu.stderr


def test_a_model_file_with_a_mistake_is_refused_naming_the_file_and_the_key(server, tmp_path):
    path = write(tmp_path, MODEL.replace("scaling: {min: 1, max: 2}", "scaling: {mni: 1}"))
    done = server.ctl("ctl", "model", "add", "-f", path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"llmgw: {path}: scaling.mni: unknown key; did you mean scaling.min?"
    assert server.ctl_json("ctl", "models") == []


def test_explain_placement_names_each_node_and_its_figures(server, tmp_path):
    server.ctl_json("ctl", "model", "add", "-f", write(tmp_path, MODEL))
    lonely = server.ctl("ctl", "explain-placement", "qwen")
    assert lonely.returncode == 0 and "there are no nodes" in lonely.stdout
    put_node(server, "small", 4)
    put_node(server, "big", 16)
    e = server.ctl_json("ctl", "explain-placement", "qwen")
    verdicts = {n["name"]: (n["fits"], n["reasons"]) for n in e["nodes"]}
    assert verdicts == {"big": (True, []),
                        "small": (False, ["not enough memory: needs 6.0 GB, free 4.0 GB of 4.0 GB"])}
    # The leader's reconciler may have placed it on big already; if not, a pass would.
    assert all((a["action"], a["node_id"]) == ("start", "id-big") for a in e["actions"])
    text = server.ctl("ctl", "explain-placement", "qwen").stdout
    assert "small  refused  0     not enough memory: needs 6.0 GB, free 4.0 GB of 4.0 GB" in text
    nodes = server.ctl_json("ctl", "nodes")
    assert [(n["name"], n["state"], n["memory_mb"]) for n in nodes] == [("big", "ready", 16384),
                                                                         ("small", "ready", 4096)]
    assert server.ctl_json("ctl", "node", "show", "big")["engines"] == {"llamacpp": "b6000"}
    assert {(r["model"], r["node"]) for r in server.ctl_json("ctl", "replicas")} <= {("qwen", "big")}


def test_a_context_its_memory_cannot_hold_is_refused_with_the_longest_that_fits(server, tmp_path):
    server.ctl_json("ctl", "model", "add", "-f", write(tmp_path, MODEL))
    put_node(server, "only", 8)
    done = server.ctl("ctl", "model", "context", "qwen", "131072")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "llmgw: a 131072-token context (1 slot) takes 16.0 GB of KV cache, so a replica of profile 0 needs "
        "21.5 GB, and only has 8.0 GB; the longest that fits is 20480 tokens")
    fits = server.ctl_json("ctl", "model", "context", "qwen", "16384", "--max-output", "2048")
    assert (fits["model"]["context_length"], fits["model"]["max_output"]) == (16384, 2048)
    assert "KV cache: 512 MB → 2.0 GB" in fits["notes"][-1]

    served = server.ctl_json("ctl", "model", "serve", "sim", "--name", "echo", "--context", "2048")
    assert served["model"]["engines"] == ["sim"] and served["model"]["context_length"] == 2048
    removed = server.ctl("ctl", "model", "remove", "echo")
    assert removed.returncode == 0 and removed.stdout.startswith("echo: removed")
    assert [m["name"] for m in json.loads(server.ctl("ctl", "models", "--json").stdout)] == ["qwen"]


def test_ctl_replicas_leaves_out_stopped_replicas_unless_asked_for_all(server):
    # What four runs of build.py left: old stops beside the replicas that matter now. The
    # stops are minutes old: the leader forgets a stopped row ten minutes after its stop.
    async def put():
        store = await open_store(server.store)
        now = time.time()
        await store.put_replicas([
            Replica("r-stopped", "gone", "id-none", state="stopped", desired="stop", since=now - 300),
            Replica("r-stopped-2", "gone", "id-none", state="stopped", desired="stop", since=now - 200),
            Replica("r-failed", "gone", "id-none", state="failed", since=now - 120,
                    message="the engine exited with 1")])
        await store.close()

    asyncio.run(put())
    assert {r["id"] for r in server.ctl_json("ctl", "replicas")} == {"r-failed"}
    assert {r["id"] for r in server.ctl_json("ctl", "replicas", "--all")} == {"r-stopped", "r-stopped-2", "r-failed"}
    text = server.ctl("ctl", "replicas").stdout
    assert "r-stopped" not in text and "r-failed" in text
    assert text.splitlines()[-1] == "(2 stopped replicas not shown; --all shows them)"


class EnginePage(BaseHTTPRequestHandler):
    """An engine's /metrics as vLLM 0.32 writes it, counting each read."""

    reads = 0
    PAGE = (b'vllm:num_requests_running{engine="0",model_name="qwen"} 2.0\n'
            b'vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.31\n'
            b'vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 490.0\n'
            b'vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 128.0\n')

    def do_GET(self) -> None:
        type(self).reads += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.PAGE)))
        self.end_headers()
        self.wfile.write(self.PAGE)

    def log_message(self, *args) -> None:
        pass


def test_the_replica_table_shows_what_each_engine_says_and_json_reads_the_engines_only_when_asked(server, tmp_path):
    engine = ThreadingHTTPServer(("127.0.0.1", 0), EnginePage)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    # A catalog model's ready replica on a node the leader holds (heard from, as put_node writes it), so the
    # leader keeps it as it is: on a node it did not know, it was taken for lost within the test (CI).
    server.ctl_json("ctl", "model", "add", "-f", write(tmp_path, MODEL))
    put_node(server, "busy", 16)

    async def put():
        store = await open_store(server.store)
        await store.put_replicas([Replica("r-busy", "qwen", "id-busy", state="ready", since=time.time(),
                                          url=f"http://127.0.0.1:{engine.server_port}/v1", cpu_cores=2,
                                          memory_mb=6144)])
        await store.close()

    try:
        asyncio.run(put())
        # What scripts, the console and the tests' loops poll: no engine is read for it.
        rows = server.ctl_json("ctl", "replicas")
        assert not any("engine" in r for r in rows) and EnginePage.reads == 0
        text = server.ctl("ctl", "replicas").stdout
        assert "2 running, 1 waiting, KV 31%, cache hits 26%" in text and EnginePage.reads == 1
        # (Beside the leader's own replica of the model, placed on the node and never started: no engine to read.)
        row = next(r for r in server.ctl_json("ctl", "replicas", "--engine") if r["id"] == "r-busy")
        assert row["engine"]["running"] == 2 and row["engine"]["prefix_hit_rate"] == 128 / 490
    finally:
        engine.shutdown()
        engine.server_close()


def test_the_audit_row_of_a_removed_model_is_one_short_line(server, tmp_path):
    server.ctl_json("ctl", "model", "add", "-f", write(tmp_path, MODEL.replace("name: qwen", "name: brief")))
    assert server.ctl("ctl", "model", "remove", "brief").returncode == 0
    text = server.ctl("ctl", "audit", "--target", "model:brief").stdout
    removal = next(line for line in text.splitlines() if "model.remove" in line)
    assert removal.rstrip().endswith("model:brief  removed (purge: false)"), text
    # The whole record is still there for scripts.
    record = server.ctl_json("ctl", "audit", "--target", "model:brief")[0]
    assert record["before"]["source"] == "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"
