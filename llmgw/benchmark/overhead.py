"""What the gateway adds to a request, measured: `llmgw ctl bench overhead`.

An instant `llmgw sim-engine` and a real `llmgw server` in front of it, each
a process of its own on loopback, and this process as the load. The same
load goes straight to the engine and through the gateway (authentication
and accounting on, as every request has them), and the difference is what
the gateway added. Where `taskset` works the gateway gets core 1 to itself
and the engine and the load share core 0, the way peers were measured on
this kind of machine; the output says which placement it ran with.

The `guard` step runs c1 again through the same gateway with the
`baseline` guardrail policy (the one `server init` installs) on every
request, in slices alternating with slices of it off, and prints its cost
over those: the pattern rules read every prompt and every answer. The
other steps run with
no policy applied, so their figures mean what they meant before init
installed the baseline.

The `traces` step (`--traces`) runs c1 again through the same gateway in
slices taking turns: tracing off (no `telemetry.otlp_endpoint`), on at
`sample_ratio: 0`, and on at 1 with every request's spans sent over
OTLP/HTTP to a collector in this process that takes them and keeps none
(llmgw/benchmark/spansink.py); it prints what ratio 0 and ratio 1 cost over
the slices with it off.

The `workers` step runs c32 and s64 again through a gateway with
`--workers 2`, unpinned, and prints the scaling against the one-process
figures above. Nothing is pinned there, so the two workers share the cores
with the engine and with this process's load, which needs a core of its
own to push that much: on a two-core machine the figure is a floor of what
a second core gives a gateway, not a measure of it.

The `nginx` step, where nginx is installed, measures the same gateway
(pinned the same way) in front of nginx serving fixed answers
(llmgw/benchmark/nginx.py): c1's added p50/p99 over nginx itself, c32's
requests and s64's streams a second. nginx takes no time of its own, so
these are the gateway's figures alone, the ones the targets are set in.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import aiohttp
import psutil

from llmgw.benchmark import nginx
from llmgw.benchmark.spansink import SpanSink
from llmgw.ports import unused_port

CHAT = {"model": "sim", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 16}
# Only an OpenAI key's shape: what the baseline must refuse, to show the guard step measured it at work.
PLANTED_SECRET = "sk-" + "B3nchK3yNotR3al0" * 3


def _pinned(core: int | None, argv: list[str]) -> list[str]:
    if core is None:
        return argv
    return ["taskset", "-c", str(core), *argv]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


def init_server(py: list[str], config: str, data_dir: str, ports: dict[str, int]) -> tuple[list[str], str]:
    """`llmgw server init` on loopback ports: the arguments `llmgw server` then takes, and the first key."""
    args = ["--config", config, "--data-dir", data_dir]
    for role, port in ports.items():
        args += [f"--listen-{role}", f"127.0.0.1:{port}"]
    init = subprocess.run([*py, "server", "init", *args, "--json"], capture_output=True, text=True)
    if init.returncode != 0:
        raise RuntimeError(f"llmgw server init failed: {init.stderr.strip()}")
    return args, json.loads(init.stdout)["key"]["key"]


def end_processes(procs: list[subprocess.Popen]) -> None:
    """SIGTERM the rig's own processes, last started first, and wait; a process that will not go in 20 s is killed."""
    for proc in reversed(procs):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Rig:
    """The engine, the gateway and a key, started by this process and ended by it."""

    engine_url: str
    gateway_url: str
    key: str
    gateway_pid: int
    placement: str
    admin: str = ""  # the gateway's admin API, HOST:PORT; its token is in `tmp`
    procs: list[subprocess.Popen] = field(default_factory=list)
    tmp: str = ""
    affinity: set[int] | None = None  # this process's cores before it was pinned, given back at stop

    @classmethod
    def start(cls, answer_tokens: int = 16, workers: int = 1, pin: bool = True, engine: str = "sim",
              sim_flags: tuple[str, ...] = ()) -> Rig:
        """engine "sim": an instant sim-engine answering `answer_tokens` (or as `sim_flags` say, such as
        --tokens-per-second); "nginx": nginx's fixed answers (llmgw/benchmark/nginx.py), the model `sim`
        its JSON answer, `sim-stream` its stream."""
        pin = pin and shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
        engine_core, gateway_core = (0, 1) if pin else (None, None)
        affinity = os.sched_getaffinity(0) if pin else None
        if pin:
            os.sched_setaffinity(0, {0})  # the load shares core 0 with the engine
        tmp = tempfile.mkdtemp(prefix="llmgw-bench-")
        py = [sys.executable, "-m", "llmgw"]
        engine_port = unused_port()
        engine_url = f"http://127.0.0.1:{engine_port}"
        if engine == "nginx":
            models = [{"name": "sim", "endpoints": [f"{engine_url}/v1"]},
                      {"name": "sim-stream", "endpoints": [f"{engine_url}/stream/v1"]}]
            served = nginx.start(engine_port, tmp, _pinned(engine_core, []))
        else:
            models = [{"name": "sim", "endpoints": [f"{engine_url}/v1"]}]
            served = subprocess.Popen(_pinned(engine_core, [*py, "sim-engine", "--port", str(engine_port), "--model",
                                                            "sim", "--max-tokens-default", str(answer_tokens),
                                                            *sim_flags]),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = [served]
        try:
            _wait_port(engine_port, served, "nginx" if engine == "nginx" else "the sim-engine")
            ports = {r: unused_port() for r in ("client", "agent", "admin", "metrics")}
            config = os.path.join(tmp, "server.yaml")
            with open(config, "w") as f:
                # guard.default set, even empty, keeps init's baseline defined but off:
                # the guard step turns it on where it measures it.
                json.dump({"models": models, "log": {"level": "warning"}, "guard": {"default": []}}, f)
            args, key = init_server(py, config, tmp, ports)
            if workers > 1:
                args += ["--workers", str(workers)]
            gateway = subprocess.Popen(_pinned(gateway_core, [*py, "server", *args]),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(gateway)
            _wait_port(ports["client"], gateway, "the gateway")
        except BaseException:
            for proc in procs:
                proc.kill()
                proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
            if affinity:
                os.sched_setaffinity(0, affinity)
            raise
        if pin:
            placement = "gateway on core 1; engine and load on core 0"
        elif workers > 1:
            placement = (f"unpinned: the gateway's {workers} workers, the engine and the load share the "
                         f"{os.cpu_count()} cores")
        else:
            placement = "unpinned (taskset missing or one core): gateway, engine and load share the cores"
        return cls(engine_url, f"http://127.0.0.1:{ports['client']}", key, gateway.pid,
                   placement, f"127.0.0.1:{ports['admin']}", procs, tmp, affinity)

    def guard_default(self, policies: list[str]) -> None:
        """Set guard.default through the admin API, as `llmgw ctl config set` would.

        One process serves here (no --workers), and the admin API applies a
        change to it before answering, so the next request is read under it.
        """
        from llmgw.control import AdminClient

        client = AdminClient(self.admin, os.path.join(self.tmp, "admin-token"))
        client.call("POST", "/api/v1/config", {"set": {"guard.default": json.dumps(policies)}})

    def telemetry(self, endpoint: str, ratio: float) -> None:
        """Set telemetry.*, as guard_default sets its key: in force for the next request."""
        from llmgw.control import AdminClient

        client = AdminClient(self.admin, os.path.join(self.tmp, "admin-token"))
        client.call("POST", "/api/v1/config", {"set": {"telemetry.otlp_endpoint": json.dumps(endpoint),
                                                       "telemetry.sample_ratio": str(ratio)}})

    def stop(self) -> None:
        end_processes(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.affinity:
            os.sched_setaffinity(0, self.affinity)


@dataclass
class Step:
    name: str
    target: str  # "direct" or "gateway"
    done: int
    failed: int
    seconds: float
    latencies: list[float]
    gateway_cpu: float = 0.0  # seconds of the gateway's CPU during the step

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


async def _closed_loop(url: str, key: str | None, concurrency: int, seconds: float, stream: bool,
                       model: str = "sim") -> tuple:
    # A stream step asks for the 64 tokens its name promises; the sim's
    # answers are --max-tokens-default long, which the stream rigs set to 64.
    body = dict(CHAT, stream=True, max_tokens=64) if stream else CHAT
    body = dict(body, model=model)
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    latencies: list[float] = []
    failed = 0
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failed
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                async with session.post(url + "/v1/chat/completions", data=payload, headers=headers) as r:
                    data = await r.read()
                    ok = r.status == 200 and (not stream or data.rstrip().endswith(b"[DONE]"))
            except aiohttp.ClientError:
                ok = False
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                failed += 1

    connector = aiohttp.TCPConnector(limit=0)
    began = time.monotonic()
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return latencies, failed, time.monotonic() - began


def run_step(rig: Rig, name: str, target: str, concurrency: int, seconds: float, stream: bool = False,
             model: str = "sim") -> Step:
    """`model` picks the rig's model; against nginx, straight to the engine, "sim-stream" is its /stream path."""
    url = rig.engine_url if target == "direct" else rig.gateway_url
    if target == "direct" and model == "sim-stream":
        url += "/stream"
    key = None if target == "direct" else rig.key
    # The gateway and its workers, if it has them (the engine is not its child).
    gateway = psutil.Process(rig.gateway_pid)
    tree = [gateway, *gateway.children(recursive=True)]
    before = [p.cpu_times() for p in tree]
    latencies, failed, took = asyncio.run(_closed_loop(url, key, concurrency, seconds, stream, model))
    after = [p.cpu_times() for p in tree]
    cpu = sum((a.user - b.user) + (a.system - b.system) for a, b in zip(after, before, strict=True))
    return Step(name, target, len(latencies), failed, took, latencies, cpu)


def overhead(seconds: float = 5.0, say=print, traces: bool = False) -> dict:
    """Run every step (the traces step with `traces`); print figures as `name: value unit` lines; return them
    for --json."""
    rig = Rig.start(answer_tokens=16)
    results: dict = {"placement": rig.placement, "seconds_per_step": seconds, "steps": {}}
    say(f"placement: {rig.placement}")
    try:
        asyncio.run(_closed_loop(rig.gateway_url, rig.key, 4, min(1.0, seconds), False))  # warm up
        plan = [("c1", 1, False), ("c32", 32, False)]
        for name, concurrency, stream in plan:
            direct = run_step(rig, name, "direct", concurrency, seconds, stream)
            through = run_step(rig, name, "gateway", concurrency, seconds, stream)
            added50, added99 = through.pct(0.5) - direct.pct(0.5), through.pct(0.99) - direct.pct(0.99)
            cpu_k = through.gateway_cpu / through.done * 1000 if through.done else float("nan")
            # float | None: the stream step's CPU per 1k is None when nothing was done.
            figures: dict[str, float | None] = {"direct_rps": round(direct.rate), "gateway_rps": round(through.rate),
                       "added_p50_ms": round(added50, 3), "added_p99_ms": round(added99, 3),
                       "gateway_cpu_s_per_1k": round(cpu_k, 3), "failed": direct.failed + through.failed}
            results["steps"][name] = figures
            for key, value in figures.items():
                unit = {"direct_rps": "req/s", "gateway_rps": "req/s", "added_p50_ms": "ms",
                        "added_p99_ms": "ms", "gateway_cpu_s_per_1k": "s"}.get(key, "")
                say(f"{name}.{key}: {value} {unit}".rstrip())
            if name == "c1":
                # The same warm gateway, its policy turned on and off between slices.
                guard = results["steps"]["guard"] = _guard_step(rig, direct, seconds)
                for key, value in guard.items():
                    say(f"guard.{key}: {value} {GUARD_UNITS.get(key, '')}".rstrip())
                if traces:
                    traced = results["steps"]["traces"] = _traces_step(rig, direct, seconds)
                    for key, value in traced.items():
                        say(f"traces.{key}: {value} {TRACES_UNITS.get(key, '')}".rstrip())
    finally:
        rig.stop()
    stream_rig = Rig.start(answer_tokens=64)
    say(f"placement: {stream_rig.placement}")
    try:
        direct = run_step(stream_rig, "s64", "direct", 64, seconds, stream=True)
        through = run_step(stream_rig, "s64", "gateway", 64, seconds, stream=True)
        figures = {"direct_streams_per_s": round(direct.rate), "gateway_streams_per_s": round(through.rate),
                   "gateway_tokens_per_s": round(through.rate * 64),
                   "gateway_cpu_s_per_1k": (round(through.gateway_cpu / through.done * 1000, 3)
                                            if through.done else None),
                   "failed": direct.failed + through.failed}
        results["steps"]["s64"] = figures
        for key, value in figures.items():
            say(f"s64.{key}: {value}")
    finally:
        stream_rig.stop()
    results["steps"]["workers"] = _workers_step(results["steps"], seconds, say)
    if nginx.available():
        results["steps"]["nginx"] = _nginx_step(seconds, say)
    else:
        say("nginx: skipped: nginx is not installed; `apt-get install nginx` (Debian) measures the gateway "
            "in front of it as well, an engine that takes no time of its own")
    return results


NGINX_UNITS = {"direct_rps": "req/s", "gateway_rps": "req/s", "added_p50_ms": "ms", "added_p99_ms": "ms",
               "c32_gateway_rps": "req/s", "s64_gateway_streams_per_s": "streams/s", "gateway_cpu_s_per_1k": "s"}


def _nginx_step(seconds: float, say) -> dict:
    """c1 (added p50/p99 over nginx itself), c32 and s64 through one gateway in front of nginx.

    Pinned as the sim steps are: the gateway on core 1, nginx and the load on
    core 0. Only c1 also goes straight to nginx: that is what the added
    figures subtract; at c32 and s64 this process's load, not nginx, would
    be what a direct figure measured.
    """
    rig = Rig.start(engine="nginx")
    say(f"placement: {rig.placement}; the engine is nginx (fixed answers)")
    try:
        asyncio.run(_closed_loop(rig.gateway_url, rig.key, 4, min(1.0, seconds), False))  # warm up
        direct = run_step(rig, "nginx", "direct", 1, seconds)
        through = run_step(rig, "nginx", "gateway", 1, seconds)
        c32 = run_step(rig, "nginx", "gateway", 32, seconds)
        s64 = run_step(rig, "nginx", "gateway", 64, seconds, stream=True, model="sim-stream")
    finally:
        rig.stop()
    figures = {"direct_rps": round(direct.rate), "gateway_rps": round(through.rate),
               "added_p50_ms": round(through.pct(0.5) - direct.pct(0.5), 3),
               "added_p99_ms": round(through.pct(0.99) - direct.pct(0.99), 3),
               "c32_gateway_rps": round(c32.rate), "s64_gateway_streams_per_s": round(s64.rate),
               "gateway_cpu_s_per_1k": round(through.gateway_cpu / through.done * 1000, 3) if through.done else None,
               "failed": direct.failed + through.failed + c32.failed + s64.failed}
    for key, value in figures.items():
        say(f"nginx.{key}: {value} {NGINX_UNITS.get(key, '')}".rstrip())
    return figures


GUARD_UNITS = {"gateway_rps": "req/s", "added_p50_ms": "ms", "added_p99_ms": "ms", "cost_p50_ms": "ms",
               "cost_p99_ms": "ms", "gateway_cpu_s_per_1k": "s", "cpu_cost_s_per_1k": "s"}
# The guard step alternates the policy on and off this many times. On a
# shared two-core machine the plain c1 p50 drifted by more than the 0.2 ms
# budget between two 5 s runs; slices side by side see the same drift.
GUARD_SLICES = 10


def _refused_by_baseline(rig: Rig) -> bool:
    async def ask() -> tuple[int, dict]:
        body = dict(CHAT, messages=[{"role": "user", "content": f"use {PLANTED_SECRET}"}])
        async with aiohttp.ClientSession() as session:
            async with session.post(rig.gateway_url + "/v1/chat/completions", json=body,
                                    headers={"Authorization": f"Bearer {rig.key}"}) as r:
                return r.status, await r.json(content_type=None)

    status, doc = asyncio.run(ask())
    return status == 400 and (doc or {}).get("error", {}).get("code") == "guardrail_blocked"


def _merged(name: str, steps: list[Step]) -> Step:
    return Step(name, "gateway", sum(s.done for s in steps), sum(s.failed for s in steps),
                sum(s.seconds for s in steps), [x for s in steps for x in s.latencies],
                sum(s.gateway_cpu for s in steps))


def _guard_step(rig: Rig, direct: Step, seconds: float) -> dict:
    """c1 through the gateway with the baseline policy on every request, in slices alternating
    with slices of it off: added over `direct`, and its cost over the slices without it."""
    on: list[Step] = []
    off: list[Step] = []
    try:
        rig.guard_default(["baseline"])
        if not _refused_by_baseline(rig):
            raise RuntimeError("the baseline policy did not refuse a planted OpenAI key, so the guard step "
                               "would measure a gateway that reads nothing")
        for i in range(GUARD_SLICES):
            guard_on = i % 2 == 0
            if i:
                rig.guard_default(["baseline"] if guard_on else [])
            (on if guard_on else off).append(run_step(rig, "guard", "gateway", 1, seconds / GUARD_SLICES))
    finally:
        rig.guard_default([])
    guarded, plain = _merged("guard", on), _merged("plain", off)

    def per_1k(step: Step) -> float:
        return step.gateway_cpu / step.done * 1000 if step.done else float("nan")

    return {"gateway_rps": round(guarded.rate),
            "added_p50_ms": round(guarded.pct(0.5) - direct.pct(0.5), 3),
            "added_p99_ms": round(guarded.pct(0.99) - direct.pct(0.99), 3),
            # The budget: with the baseline's patterns on, the added
            # p50 stays within 0.2 ms of the run without them.
            "cost_p50_ms": round(guarded.pct(0.5) - plain.pct(0.5), 3),
            "cost_p99_ms": round(guarded.pct(0.99) - plain.pct(0.99), 3),
            "gateway_cpu_s_per_1k": round(per_1k(guarded), 3),
            "cpu_cost_s_per_1k": round(per_1k(guarded) - per_1k(plain), 3),
            "failed": guarded.failed + plain.failed}


TRACES_UNITS = {"added_p50_ms": "ms", "ratio0_cost_p50_ms": "ms", "ratio0_cost_p99_ms": "ms",
                "ratio1_cost_p50_ms": "ms", "ratio1_cost_p99_ms": "ms", "ratio0_cpu_cost_s_per_1k": "s",
                "ratio1_cpu_cost_s_per_1k": "s"}
# Rounds of (off, ratio 0, ratio 1) slices, side by side for the same reason as the guard step's.
TRACES_ROUNDS = 4


def _traces_step(rig: Rig, direct: Step, seconds: float) -> dict:
    """c1 through the gateway in slices taking turns: tracing off, on at ratio 0, on at ratio 1 to a sink."""
    sink = SpanSink()
    modes: dict[str, list[Step]] = {"off": [], "ratio0": [], "ratio1": []}
    slice_s = seconds / (TRACES_ROUNDS * len(modes))
    try:
        # Once on before the slices: the first provider imports the SDK and the exporter (a tenth of a
        # second), which no slice should count.
        rig.telemetry(sink.url, 1.0)
        run_step(rig, "traces", "gateway", 1, slice_s)
        for _ in range(TRACES_ROUNDS):
            for mode, steps in modes.items():
                rig.telemetry("" if mode == "off" else sink.url, 0.0 if mode == "ratio0" else 1.0)
                # The provider replaced sends what it held from a thread of its own: let it, before a
                # slice it would otherwise be counted in.
                time.sleep(0.2)
                steps.append(run_step(rig, "traces", "gateway", 1, slice_s))
        rig.telemetry("", 1.0)  # the provider replaced: what it held is sent before the sink is asked
        if not sink.wait(timeout=10):
            raise RuntimeError("no spans reached the bench's collector at sample_ratio 1, so the traces step "
                               "would measure a gateway that sends none")
    finally:
        rig.telemetry("", 1.0)
        sink.close()
    off, ratio0, ratio1 = (_merged(mode, steps) for mode, steps in modes.items())

    def per_1k(step: Step) -> float:
        return step.gateway_cpu / step.done * 1000 if step.done else float("nan")

    return {"gateway_rps": round(ratio1.rate),
            "added_p50_ms": round(ratio1.pct(0.5) - direct.pct(0.5), 3),
            "ratio0_cost_p50_ms": round(ratio0.pct(0.5) - off.pct(0.5), 3),
            "ratio0_cost_p99_ms": round(ratio0.pct(0.99) - off.pct(0.99), 3),
            "ratio1_cost_p50_ms": round(ratio1.pct(0.5) - off.pct(0.5), 3),
            "ratio1_cost_p99_ms": round(ratio1.pct(0.99) - off.pct(0.99), 3),
            "ratio0_cpu_cost_s_per_1k": round(per_1k(ratio0) - per_1k(off), 3),
            "ratio1_cpu_cost_s_per_1k": round(per_1k(ratio1) - per_1k(off), 3),
            "spans_received": sink.spans,
            "failed": off.failed + ratio0.failed + ratio1.failed}


def _workers_step(one: dict, seconds: float, say, workers: int = 2) -> dict:
    """c32 and s64 again through `--workers 2`, and the scaling against the one-process figures."""
    # max_tokens in the body decides the answer's length here, so one rig
    # answers both loads as the c32 and s64 rigs did.
    rig = Rig.start(answer_tokens=64, workers=workers, pin=False)
    say(f"placement: {rig.placement}")
    say("workers: the load generator and the engine compete with the workers for the same cores, "
        "so the scaling below is a floor of what the second worker gives")
    try:
        asyncio.run(_closed_loop(rig.gateway_url, rig.key, 4, min(1.0, seconds), False))  # every worker up
        c32 = run_step(rig, "c32", "gateway", 32, seconds)
        s64 = run_step(rig, "s64", "gateway", 64, seconds, stream=True)
    finally:
        rig.stop()

    def scaling(now: float, before: float) -> float | None:
        return round(now / before, 2) if before else None

    figures = {"workers": workers, "c32_gateway_rps": round(c32.rate),
               "c32_scaling": scaling(c32.rate, one["c32"]["gateway_rps"]),
               "s64_gateway_streams_per_s": round(s64.rate),
               "s64_scaling": scaling(s64.rate, one["s64"]["gateway_streams_per_s"]),
               "gateway_cpu_s_per_1k": round(c32.gateway_cpu / c32.done * 1000, 3) if c32.done else None,
               "failed": c32.failed + s64.failed}
    units = {"c32_gateway_rps": "req/s", "s64_gateway_streams_per_s": "streams/s", "c32_scaling": "x",
             "s64_scaling": "x", "gateway_cpu_s_per_1k": "s"}
    for key, value in figures.items():
        say(f"workers.{key}: {value} {units.get(key, '')}".rstrip())
    return figures
