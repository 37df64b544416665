"""What the gateway adds in front of a real engine that a control plane placed on a node: vLLM, or SGLang.

A real `llmgw server` (SQLite in a temporary directory, loopback ports), one `llmgw agent` joined to it,
and the Llama folder of random weights that tests/fixtures/tinyllama.py writes, served as a set of files
over HTTP and added to the catalog. The agent installs the engine's pinned release itself, as on any node:
vLLM's CUDA build on one card where this machine has an NVIDIA GPU, its CPU build where it has none;
`--engine sglang` (cards only). Then the same chat request (8 tokens out, greedy) goes straight to the
engine with the cluster's engine key (read from the agent's key file, as only the node's root can) and
through the gateway with a client key, in alternating slices, first one at a time and then 8 at once:
the difference is what the gateway added, authentication, admission, routing and accounting included.

Prints:
  engines_install_s: from the model added to the engine installed (pip; 0 when an earlier run left it)
  engines_ready_s: from the model added to the replica ready (weights fetched, installed, loaded)
  engines_direct_p50_ms, engines_direct_p99_ms: c1, straight to the engine
  engines_gateway_p50_ms, engines_gateway_p99_ms: c1, through the gateway
  engines_added_p50_ms, engines_added_p99_ms: the gateway's part of c1
  engines_c8_direct_rps, engines_c8_gateway_rps: 8 at once
  engines_engine_ttft_ms: the engine's own mean time to first token over the run (its /metrics)

`--keep DIR` installs the engine under DIR/engines and leaves it there for the next run; the GPU
machine's script (benchmarks/gpu/engines.sh) runs this bench for vLLM, then SGLang.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.tinyllama import write_tiny_llama  # noqa: E402 - the checkout's own test kit
from tests.support.agents import AgentProcess  # noqa: E402
from tests.support.servers import Server, serving_with_first_key  # noqa: E402

# The first run on a machine installs the engine with pip (3.5 GB with torch for vLLM's CPU build: 71 s with
# pip's cache warm on the 2-core machine, minutes more without), then loads it.
LIMIT_S = 900
PROMPT = [{"role": "user", "content": "Hello, how are you today? Tell me about the weather."}]


def _serve_folder(directory: Path) -> tuple[ThreadingHTTPServer, str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _wait(predicate, timeout: float, what: str, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"bench engines: {what} did not happen in {timeout:.0f} s")


async def _one(session: aiohttp.ClientSession, url: str, key: str, model: str) -> float:
    body = {"model": model, "messages": PROMPT, "max_tokens": 8, "temperature": 0}
    started = time.perf_counter()
    async with session.post(url + "/chat/completions", json=body,
                            headers={"Authorization": f"Bearer {key}"}) as response:
        await response.read()
        if response.status != 200:
            raise SystemExit(f"bench engines: {url} answered {response.status}")
    return (time.perf_counter() - started) * 1000


async def _measure(direct: tuple[str, str], gateway: tuple[str, str], model: str, seconds: float) -> dict:
    figures: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        for url, key in (direct, gateway):  # warm both paths: connections, the engine's first batches
            for _ in range(3):
                await _one(session, url, key, model)
        times: dict[str, list[float]] = {"direct": [], "gateway": []}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # slices taking turns, so a drift in the engine is shared
            for name, (url, key) in (("direct", direct), ("gateway", gateway)):
                for _ in range(5):
                    times[name].append(await _one(session, url, key, model))
        for name, values in times.items():
            values.sort()
            figures[f"{name}_p50_ms"] = statistics.median(values)
            figures[f"{name}_p99_ms"] = values[min(len(values) - 1, int(len(values) * 0.99))]
        figures["added_p50_ms"] = figures["gateway_p50_ms"] - figures["direct_p50_ms"]
        figures["added_p99_ms"] = figures["gateway_p99_ms"] - figures["direct_p99_ms"]
        for name, (url, key) in (("direct", direct), ("gateway", gateway)):
            figures[f"c8_{name}_rps"] = await _rate(session, url, key, model, seconds)
    return figures


async def _rate(session: aiohttp.ClientSession, url: str, key: str, model: str, seconds: float) -> float:
    """Requests a second answered with 8 always in flight."""
    done, started = 0, time.monotonic()

    async def worker() -> None:
        nonlocal done
        while time.monotonic() - started < seconds:
            await _one(session, url, key, model)
            done += 1

    await asyncio.gather(*(worker() for _ in range(8)))
    return done / (time.monotonic() - started)


def _engine_ttft_ms(url: str) -> float | None:
    import urllib.request

    from llmgw.router.scrape import load_from, metrics_url, parse_metrics

    with urllib.request.urlopen(metrics_url(url), timeout=5) as response:
        load = load_from(parse_metrics(response.read().decode()), 0.0)
    if load is None or not load.ttft_count or load.ttft_sum is None:
        return None
    return load.ttft_sum / load.ttft_count * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--seconds", type=float, default=10.0, help="each step's length (default 10)")
    parser.add_argument("--keep", metavar="DIR", help="install the engine under DIR/engines, kept for the next run")
    parser.add_argument("--index", default="", help="engines.ENGINE.index for the agent (off: pip's own only)")
    args = parser.parse_args(argv)
    gpu = os.path.exists("/dev/nvidiactl")
    if args.engine == "sglang" and not gpu:
        print("bench engines: skipped: SGLang runs on NVIDIA cards only, and this machine has none")
        return 0
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-engines-"))
    engines = Path(args.keep) / "engines" if args.keep else root / "engines"
    engines.mkdir(parents=True, exist_ok=True)
    files = write_tiny_llama(root / "weights" / "tiny")
    sums = {n: hashlib.sha256((root / "weights" / "tiny" / n).read_bytes()).hexdigest() for n in files}
    weights, weights_url = _serve_folder(root / "weights")
    server = serving_with_first_key(Server(root, "cp"))
    agent = AgentProcess(root, "node-a")
    settings = {"user": "", args.engine: {"index": args.index} if args.index else {}}
    agent.join(server, engines_dir=engines, engines=settings).start()
    try:
        profile: dict = {"engine": args.engine, "cpu_cores": 1, "memory": "4GB"}
        if gpu:
            profile["gpus"] = {"count": 1}
        else:
            profile.update(args=["--enforce-eager"], env={"VLLM_CPU_KVCACHE_SPACE": "1"})
        spec = {"name": "tiny-llama", "source": f"{weights_url}/tiny", "files": sums, "context_length": 512,
                "profiles": [profile]}
        (root / "model.yaml").write_text(yaml.safe_dump(spec))
        added = time.monotonic()
        done = server.ctl("ctl", "model", "add", "-f", str(root / "model.yaml"))
        if done.returncode != 0:
            raise SystemExit(f"bench engines: the model was refused: {done.stdout}{done.stderr}")
        before = {p.name for p in engines.iterdir()}

        def ready():
            rows = server.ctl_json("ctl", "replicas", "--model", "tiny-llama")
            found = [r for r in rows if r["state"] == "ready"]
            if any(r["state"] == "failed" for r in rows):
                raise SystemExit(f"bench engines: the replica failed: {rows}\n{agent.output()[-4000:]}")
            return found[0] if found else None

        replica = _wait(ready, 1800, "the replica becoming ready")
        ready_s = time.monotonic() - added
        # pip's own time, as the agent wrote it beside the environment it made (0: an earlier run's).
        install_s = sum(json.loads((p / "installed.json").read_text()).get("seconds", 0.0)
                        for p in engines.iterdir() if p.name not in before and (p / "installed.json").exists())
        (key_file,) = (agent.dir / "data" / "engines-run" / "keys").glob("*.key")
        figures = asyncio.run(_measure((replica["url"], key_file.read_text().strip()),
                                       (server.client_url + "/v1", server.key), "tiny-llama", args.seconds))
        ttft = _engine_ttft_ms(replica["url"])
        where = "one NVIDIA card" if gpu else "CPUs (its CPU build)"
        print(f"{args.engine} on {where}, the tiny Llama of random weights, chat with 8 tokens out")
        print(f"engines_install_s: {install_s:.1f} s")
        print(f"engines_ready_s: {ready_s:.1f} s")
        for name in ("direct_p50_ms", "direct_p99_ms", "gateway_p50_ms", "gateway_p99_ms", "added_p50_ms",
                     "added_p99_ms"):
            print(f"engines_{name}: {figures[name]:.2f} ms")
        print(f"engines_c8_direct_rps: {figures['c8_direct_rps']:.1f} req/s")
        print(f"engines_c8_gateway_rps: {figures['c8_gateway_rps']:.1f} req/s")
        if ttft is not None:
            print(f"engines_engine_ttft_ms: {ttft:.1f} ms")
        print(json.dumps({"engine": args.engine, "gpu": gpu, **figures, "ready_s": ready_s}), file=sys.stderr)
    finally:
        agent.stop(stop_engines=True)
        server.stop()
        weights.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
