"""Routing by what each replica has cached: sim engines keeping a prefix cache as vLLM does publish their KV events,
a real agent follows them to a real control plane, and the router sends a prompt to the replica that holds it.

Two models of two sim replicas each, on one node. Five long system prompts (18 blocks of 16 tokens each), and each
replica's cache holds 60 blocks, three of them: with `prefix-cache` each prompt settles on one replica and is found
there again; with `batch` (the shortest queue, turn about on a tie) an odd number of prompts takes turns over both
replicas, so each sees all five, and its cache churns through them. The engines' own counters
(vllm:prefix_cache_hits and _queries) say which.
"""

from __future__ import annotations

import openai
import pytest
import yaml

from tests.fixtures.tinyllama import write_tiny_llama
from tests.support.agents import AgentProcess
from tests.support.servers import serving_with_first_key, write_config
from tests.support.simengines import prefix_cache_counts
from tests.support.waiting import wait_for

# Sentences of the tiny tokenizer's own training text (tests/fixtures/tinyllama.py), so each is a few tokens.
SYSTEMS = [" ".join([f"Prompt {n}: the sun is shining and the sky is blue."] * 14) for n in range(5)]
ROUNDS = 5


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "two workers"])
def test_requests_sharing_a_long_system_prompt_go_to_the_replica_whose_engine_holds_it(servers, tmp_path, workers):
    # With two workers the leader's main process routes nothing: each worker keeps its own index, told by it.
    server = servers("cp1", config=write_config(tmp_path / "server.yaml", {"workers": workers}))
    server.first_key = serving_with_first_key(server).key
    tokenizer = tmp_path / "tiny"
    tokenizer.mkdir()
    write_tiny_llama(tokenizer)
    (tmp_path / "engines").mkdir()
    agent = AgentProcess(tmp_path, "node-a").join(server, engines_dir=tmp_path / "engines")
    agent.start()
    try:
        for name in ("by-cache", "by-queue"):
            doc = {"name": name, "tokenizer": str(tokenizer), "scaling": {"min": 2, "max": 2},
                   "profiles": [{"engine": "sim", "cpu_cores": 0, "memory": "64MB",
                                 "args": ["--tokenizer", str(tokenizer), "--block-size", "16",
                                          "--cache-blocks", "60"]}]}
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(doc))
            done = server.ctl("ctl", "model", "add", "-f", str(path))
            assert done.returncode == 0, done.stdout + done.stderr
        client = openai.OpenAI(api_key=server.first_key, base_url=server.client_url + "/v1", max_retries=0)
        wait_for(lambda: sum(r["state"] == "ready" for r in server.ctl_json("ctl", "replicas")) == 4, timeout=90,
                 interval=0.5)

        def ask(model: str, profile: str, system: str, question: str) -> None:
            client.chat.completions.create(model=model, max_tokens=2, extra_headers={"x-llmgw-profile": profile},
                                           messages=[{"role": "system", "content": system},
                                                     {"role": "user", "content": question}])

        # The first of each prompt goes where the queues say; its blocks reach the leader from the agent within
        # the agent's gathering interval (agent/kvfeed.py FLUSH_S), waited for before the prompt is asked again.
        for system in SYSTEMS:
            before = blocks_held(server, "by-cache")
            ask("by-cache", "prefix-cache", system, "Hello")
            wait_for(lambda before=before: blocks_held(server, "by-cache") > before, timeout=15, interval=0.2)
        for question in range(ROUNDS):
            for system in SYSTEMS:
                ask("by-cache", "prefix-cache", system, f"Question {question}")
        for question in range(ROUNDS + 1):
            for system in SYSTEMS:
                ask("by-queue", "batch", system, f"Question {question}")

        cache_hits, cache_queries = prefix_cache_counts(server, "by-cache")
        queue_hits, queue_queries = prefix_cache_counts(server, "by-queue")
        by_cache, by_queue = cache_hits / cache_queries, queue_hits / queue_queries
        print(f"prompt tokens found in cache: prefix-cache {by_cache:.0%}, batch {by_queue:.0%}")
        # Every repeat of a prompt finds all of its system prompt's blocks, which are most of its tokens.
        assert by_cache > 0.7
        assert by_cache > 1.5 * by_queue
    finally:
        agent.stop(stop_engines=True)


def blocks_held(server, model: str) -> int:
    """The blocks the model's engines hold, as the leader last heard from their agent (`ctl replicas`)."""
    return sum(r.get("cached_blocks", 0) for r in server.ctl_json("ctl", "replicas", "--model", model))
