"""Routing by cache against the session ring and turn-about: how much of each prompt the engines find cached.

A real `llmgw server` (SQLite in a temporary directory, loopback ports), one `llmgw agent` joined to it, and
three models of four sim replicas each, every replica keeping a prefix cache as vLLM does (`--tokenizer`, the
tokenizer tests/fixtures/tinyllama.py writes; 16-token blocks) that holds three of the eight long system prompts
(about 30 blocks each), and a first token that waits for the prompt tokens it did not find
(`--prefill-tokens-per-second`). Each model is routed by one profile:

    chat          the session ring: a conversation's own replica (its key from the system prompt and first question)
    batch         the shortest queue, turn about on a tie: round-robin while they keep up
    prefix-cache  the replica holding most of the prompt, from the engines' own KV events (docs/routing.md)

The same requests go to each: 8 clients at once, each request one of the eight system prompts at random and a
question of its own, so a system prompt is shared by many conversations, as conversations that move between
clients, or many people behind one assistant, share theirs. The hit share is the engines' own count
(vllm:prefix_cache_hits over _queries), taken after a warm-up of one request per prompt; the TTFT is the client's,
to the first streamed chunk.

Prints, for each profile P (chat, batch, prefix_cache):
  routing_P_hit_share: prompt tokens found in the engines' caches, of those looked up
  routing_P_ttft_p50_ms, routing_P_ttft_p99_ms: time to the first token at the client
  routing_prefix_cache_vs_chat: the hit share of prefix-cache over the session ring's (the target: 1.5 or more)

`--requests N` (default 240 per profile) and `--prefill R` (tokens a second, default 4000) change the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fixtures.tinyllama import write_tiny_llama
from tests.support.agents import AgentProcess
from tests.support.servers import Server, serving_with_first_key
from tests.support.simengines import prefix_cache_counts

# Twelve sims, three passes of 240 requests: about 90 s here, more on a loaded machine.
LIMIT_S = 300
PROFILES = ("chat", "batch", "prefix-cache")
REPLICAS = 4
PROMPTS = 8
# Each replica holds three prompts' blocks and some questions': the eight prompts fit across four replicas
# only when each replica keeps to its own two.
CACHE_BLOCKS = 110
CLIENTS = 8
SENTENCES = ["the sun is shining and the sky is blue.", "a tiny model answers questions.",
             "the sky is blue and the sun is shining."]


def system_prompt(n: int) -> str:
    rng = random.Random(n)
    return f"Assistant {n}. " + " ".join(rng.choice(SENTENCES) for _ in range(45))


async def one(session: aiohttp.ClientSession, url: str, key: str, model: str, profile: str, prompt: int,
              question: str) -> float:
    body = {"model": model, "stream": True, "max_tokens": 4,
            "messages": [{"role": "system", "content": system_prompt(prompt)}, {"role": "user", "content": question}]}
    started = time.perf_counter()
    async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}",
                                                     "x-llmgw-profile": profile}) as resp:
        if resp.status != 200:
            raise SystemExit(f"bench routing: {model} answered {resp.status}: {await resp.text()}")
        first = None
        async for _ in resp.content.iter_any():
            first = first or time.perf_counter() - started
    return first or 0.0


async def drive(url: str, key: str, model: str, profile: str, requests: int) -> list[float]:
    rng = random.Random(7)
    work = [(rng.randrange(PROMPTS), f"Question {i} from client {i % 97}") for i in range(requests)]
    ttfts: list[float] = []
    async with aiohttp.ClientSession() as session:
        queue = list(work)

        async def client() -> None:
            while queue:
                prompt, question = queue.pop()
                ttfts.append(await one(session, url, key, model, profile, prompt, question))

        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return ttfts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--prefill", type=float, default=4000.0)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-routing-"))
    tokenizer = root / "tiny"
    tokenizer.mkdir()
    write_tiny_llama(tokenizer)
    server = serving_with_first_key(Server(root, "cp"))
    agent = AgentProcess(root, "node-a")
    (root / "engines").mkdir()
    agent.join(server, engines_dir=root / "engines").start()
    try:
        models = {profile: f"by-{profile}" for profile in PROFILES}
        for model in models.values():
            spec = {"name": model, "tokenizer": str(tokenizer), "scaling": {"min": REPLICAS, "max": REPLICAS},
                    "profiles": [{"engine": "sim", "cpu_cores": 0, "memory": "64MB",
                                  "args": ["--tokenizer", str(tokenizer), "--block-size", "16",
                                           "--cache-blocks", str(CACHE_BLOCKS),
                                           "--prefill-tokens-per-second", str(args.prefill)]}]}
            (root / f"{model}.yaml").write_text(yaml.safe_dump(spec))
            done = server.ctl("ctl", "model", "add", "-f", str(root / f"{model}.yaml"))
            if done.returncode != 0:
                raise SystemExit(f"bench routing: the model was refused: {done.stdout}{done.stderr}")
        deadline = time.monotonic() + 120
        while sum(r["state"] == "ready" for r in server.ctl_json("ctl", "replicas")) < REPLICAS * len(PROFILES):
            if time.monotonic() > deadline:
                raise SystemExit(f"bench routing: the replicas did not all become ready\n{agent.output()[-3000:]}")
            time.sleep(0.5)
        url = server.client_url + "/v1/chat/completions"
        results = {}
        for profile, model in models.items():
            # A warm-up of one request a prompt, each waited for, so every profile starts from its engines
            # holding the eight prompts wherever its first choices put them.
            for prompt in range(PROMPTS):
                asyncio.run(drive_one(url, server.key, model, profile, prompt))
            time.sleep(0.5)  # the last warm-up's blocks reach the leader (agent/kvfeed.py gathers 0.1 s)
            hits0, queries0 = prefix_cache_counts(server, model)
            ttfts = asyncio.run(drive(url, server.key, model, profile, args.requests))
            hits, queries = prefix_cache_counts(server, model)
            share = (hits - hits0) / (queries - queries0) if queries > queries0 else 0.0
            ttfts.sort()
            results[profile] = (share, statistics.median(ttfts) * 1000, ttfts[int(0.99 * (len(ttfts) - 1))] * 1000)
        print(f"{REPLICAS} sim replicas a profile, {PROMPTS} system prompts of about 30 blocks, each replica "
              f"holding {CACHE_BLOCKS} blocks; {args.requests} requests, {CLIENTS} at once, prefill at "
              f"{args.prefill:.0f} tokens/s")
        for profile, (share, p50, p99) in results.items():
            name = profile.replace("-", "_")
            print(f"routing_{name}_hit_share: {share:.1%}")
            print(f"routing_{name}_ttft_p50_ms: {p50:.1f} ms")
            print(f"routing_{name}_ttft_p99_ms: {p99:.1f} ms")
        ring = results["chat"][0]
        ratio = results["prefix-cache"][0] / ring if ring else float("inf")
        print(f"routing_prefix_cache_vs_chat: {ratio:.2f}x")
        print(json.dumps({p: {"hit_share": r[0], "ttft_p50_ms": r[1], "ttft_p99_ms": r[2]}
                          for p, r in results.items()}), file=sys.stderr)
    finally:
        agent.stop(stop_engines=True)
        server.stop()
    return 0


async def drive_one(url: str, key: str, model: str, profile: str, prompt: int) -> None:
    async with aiohttp.ClientSession() as session:
        await one(session, url, key, model, profile, prompt, "Hello")
    await asyncio.sleep(0.3)


if __name__ == "__main__":
    sys.exit(main())
