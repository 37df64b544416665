"""How much a sim-engine can answer: the ceiling a gateway bench must stay under.

Starts `llmgw sim-engine` (instant: no pacing, no time to first token) and
drives it from a separate load-generator process (this script with --load,
an aiohttp client on uvloop), each pinned to a core of its own with taskset
when there is one: the engine on core 1, the load on core 0.

Prints, per step (1 s warm-up, then 5 s measured):
  sim_chat_rps / _p50_ms / _p99_ms: non-streamed chat completions (16 tokens), 32 at once
  sim_stream64_rps / _tok_s / _p50_ms: 64-token streams read to [DONE], 64 at once
  *_engine_cpu: the engine's CPU over the step, in percent of one core
  *_per_engine_core: the rate scaled to a fully busy engine core (rate / cpu). When
      the engine's CPU is under 100 %, the load generator was the limit and this
      is the better estimate of the engine's own ceiling.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, TypedDict


class Step(TypedDict):
    concurrency: int
    body: dict[str, Any]


STEPS: dict[str, Step] = {
    "chat": {"concurrency": 32, "body": {"model": "sim", "max_tokens": 16,
                                         "messages": [{"role": "user", "content": "Say something short."}]}},
    "stream64": {"concurrency": 64, "body": {"model": "sim", "max_tokens": 64, "stream": True,
                                             "messages": [{"role": "user", "content": "Say something long."}]}},
}
WARM_SECONDS = 1.0
SECONDS = 5.0


async def drive(url: str, step: str) -> dict:
    import aiohttp

    spec = STEPS[step]
    body = json.dumps(spec["body"]).encode()
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    measuring = False
    stop_at = time.monotonic() + WARM_SECONDS + SECONDS

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.monotonic() < stop_at:
            start = time.perf_counter()
            async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                data = await r.read()
            ok = r.status == 200 and (not spec["body"].get("stream") or data.endswith(b"data: [DONE]\n\n"))
            if measuring:
                if ok:
                    latencies.append(time.perf_counter() - start)
                else:
                    errors += 1

    connector = aiohttp.TCPConnector(limit=spec["concurrency"])
    async with aiohttp.ClientSession(connector=connector) as http:
        workers = [asyncio.ensure_future(worker(http)) for _ in range(spec["concurrency"])]
        await asyncio.sleep(WARM_SECONDS)
        measuring = True
        # Told the parent when the measured part starts, so it reads the engine's CPU then.
        print("measuring", flush=True)
        began, cpu_began = time.perf_counter(), time.process_time()
        await asyncio.gather(*workers)
        took = time.perf_counter() - began
        load_cpu = (time.process_time() - cpu_began) / took
    latencies.sort()
    return {"count": len(latencies), "errors": errors, "seconds": took, "load_cpu": load_cpu,
            "p50": latencies[len(latencies) // 2] if latencies else 0.0,
            "p99": latencies[int(len(latencies) * 0.99)] if latencies else 0.0}


def load_main(url: str, step: str) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(drive(url, step))), flush=True)
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) >= 2 else []


def start_engine() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([*pinned(1), sys.executable, "-m", "llmgw", "sim-engine", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None  # stdout=PIPE: typeshed types every Popen stream Optional
    deadline = time.monotonic() + 20
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        if select.select([proc.stdout], [], [], 0.1)[0]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    if b" listening on " not in line:
        raise RuntimeError(f"the sim-engine did not start: {line.decode(errors='replace')!r}")
    return proc, line.decode().strip().rsplit(" ", 1)[1]


def run_step(engine: subprocess.Popen, url: str, step: str) -> dict:
    load = subprocess.Popen([*pinned(0), sys.executable, __file__, "--load", url, step],
                            stdout=subprocess.PIPE, text=True)
    assert load.stdout is not None  # stdout=PIPE: typeshed types every Popen stream Optional
    try:
        assert load.stdout.readline().strip() == "measuring", "the load generator did not start"
        cpu_before, wall_before = cpu_seconds(engine.pid), time.perf_counter()
        result = json.loads(load.stdout.readline())
        result["engine_cpu"] = (cpu_seconds(engine.pid) - cpu_before) / (time.perf_counter() - wall_before)
        load.wait(10)
        return result
    finally:
        if load.poll() is None:
            os.kill(load.pid, signal.SIGTERM)
            load.wait(10)


def main() -> int:
    where = ("engine pinned to core 1 and load generator to core 0 with taskset" if pinned(0)
             else "unpinned: no taskset or a single core, engine and load share the cores")
    print(f"sim-engine ceiling, {where}; {WARM_SECONDS:.0f} s warm-up then {SECONDS:.0f} s a step")
    engine, url = start_engine()
    failed = False
    try:
        for step, unit in (("chat", "req/s"), ("stream64", "streams/s")):
            r = run_step(engine, url, step)
            rate = r["count"] / r["seconds"]
            cpu = r["engine_cpu"]
            print(f"  {step}: {STEPS[step]['concurrency']} at once, {r['count']} answers, {r['errors']} failed")
            print(f"sim_{step}_rps: {rate:.0f} {unit}")
            if step == "stream64":
                print(f"sim_{step}_tok_s: {rate * 64:.0f} tok/s")
            print(f"sim_{step}_p50_ms: {r['p50'] * 1000:.2f} ms")
            print(f"sim_{step}_p99_ms: {r['p99'] * 1000:.2f} ms")
            print(f"sim_{step}_engine_cpu: {cpu * 100:.0f} %")
            print(f"sim_{step}_load_cpu: {r['load_cpu'] * 100:.0f} %")
            print(f"sim_{step}_per_engine_core: {rate / max(cpu, 0.01):.0f} {unit}")
            failed = failed or r["errors"] > 0 or r["count"] == 0
    finally:
        os.kill(engine.pid, signal.SIGTERM)
        engine.wait(10)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--load":
        sys.exit(load_main(sys.argv[2], sys.argv[3]))
    sys.exit(main())
