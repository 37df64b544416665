"""Two routers' throughput against one: two control planes with `router.active_active`, each on its own core.

Two `llmgw server` processes on one throwaway PostgreSQL (tests/support/pgcluster.py),
`router.active_active` on, the first pinned to core 0 and the second to
core 1, in front of one instant sim-engine. The same c32 load (not streamed,
authentication and accounting on) goes first to the leader alone, then half
to each; the figures are requests a second, and the standby's own count of
requests it answered (its `llmgw_requests` on /metrics), which shows it
routed them itself rather than passing them to the leader.

On a two-core machine the engine and this process's load share those two
cores with the routers, so `scaling` is a floor of what a second router
gives, not a measure of it.

Skipped, with a line saying so, where this build has no `router.active_active`
setting yet or PostgreSQL is not installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The repository's root, for the test kit (tests.support): a bench runs as a script, from benchmarks/.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from llmgw.benchmark.overhead import _closed_loop, _free_port, _pinned, _wait_port
from llmgw.config.router import RouterSettings

SECONDS = 5.0
CONCURRENCY = 32
PY = [sys.executable, "-m", "llmgw"]


def skip_reason() -> str | None:
    if "active_active" not in {f.name for f in dataclasses.fields(RouterSettings)}:
        return "router.active_active is not a setting of this build yet (llmgw/config/router.py)"
    from tests.support.pgcluster import find_bin

    try:
        find_bin()
    except RuntimeError:
        return "PostgreSQL is not installed (apt-get install postgresql); two control planes need one store"
    return None


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} within {timeout:.0f} s")


class ControlPlane:
    def __init__(self, root: str, name: str, store: str, config: str, core: int | None):
        self.name, self.core = name, core
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.ports = {role: _free_port() for role in ("client", "agent", "admin", "metrics")}
        self.args = ["--name", name, "--data-dir", self.dir, "--store", store, "--config", config]
        for role, port in self.ports.items():
            self.args += [f"--listen-{role}", f"127.0.0.1:{port}"]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['client']}"

    def init(self) -> str:
        done = subprocess.run([*PY, "server", "init", *self.args, "--json"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"llmgw server init failed: {done.stderr.strip()}")
        return json.loads(done.stdout)["key"]["key"]

    def start(self) -> None:
        self.proc = subprocess.Popen(_pinned(self.core, [*PY, "server", *self.args]),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.ports["client"], self.proc, f"control plane {self.name}")

    def answered(self) -> float:
        """Requests this control plane's router answered with 200, from its /metrics."""
        status, body = _get(f"http://127.0.0.1:{self.ports['metrics']}/metrics")
        total = 0.0
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("llmgw_requests_total{") and 'status="200"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _load(targets: list[str], key: str, seconds: float) -> tuple[int, int, float]:
    """CONCURRENCY requests in flight, split evenly over the targets; (done, failed, seconds)."""
    share = CONCURRENCY // len(targets)
    runs = await asyncio.gather(*(_closed_loop(url, key, share, seconds, False) for url in targets))
    return sum(len(r[0]) for r in runs), sum(r[1] for r in runs), max(r[2] for r in runs)


def bench() -> int:
    from tests.support.pgcluster import PgCluster

    pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
    root = tempfile.mkdtemp(prefix="llmgw-bench-aa-")
    cluster = PgCluster()
    procs: list = []
    planes: list[ControlPlane] = []
    try:
        store = cluster.create_database()
        engine_port = _free_port()
        engine = subprocess.Popen([*PY, "sim-engine", "--port", str(engine_port), "--model", "sim",
                                   "--max-tokens-default", "16"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(engine)
        _wait_port(engine_port, engine, "the sim-engine")
        config = os.path.join(root, "server.yaml")
        with open(config, "w") as f:
            json.dump({"models": [{"name": "sim", "endpoints": [f"http://127.0.0.1:{engine_port}/v1"]}],
                       "log": {"level": "warning"}, "guard": {"default": []},
                       "router": {"active_active": True}}, f)
        a = ControlPlane(root, "cp-a", store, config, 0 if pin else None)
        b = ControlPlane(root, "cp-b", store, config, 1 if pin else None)
        planes += [a, b]
        key = a.init()
        a.start()
        _until(lambda: _get(a.url + "/leader")[0] == 200, 20, "the first control plane did not lead")
        # Every control plane holds the cluster's master key (docs/ha.md), made by the first at its
        # start; the standby needs it to follow the leader over the agent port.
        shutil.copy(os.path.join(a.dir, "master-key"), os.path.join(b.dir, "master-key"))
        os.chmod(os.path.join(b.dir, "master-key"), 0o600)
        b.start()
        print("placement: " + ("cp-a (the leader) on core 0, cp-b (a standby) on core 1; the engine and the load "
                               "unpinned, sharing both" if pin else "unpinned: taskset missing or one core"))
        # The standby reads the key from the store, and routes itself once it follows the leader.
        _until(lambda: asyncio.run(_closed_loop(b.url, key, 1, 0.2, False))[0], 30,
               "the standby did not answer /v1")
        try:
            _until(lambda: asyncio.run(_closed_loop(b.url, key, 1, 0.2, False))[0] and b.answered() > 0, 20,
                   "passing on")
        except RuntimeError:
            pass  # measured all the same; the figures below say the standby answered none itself
        asyncio.run(_load([a.url, b.url], key, 1.0))  # warm up both
        done, failed_one, took = asyncio.run(_load([a.url], key, SECONDS))
        one = done / took
        before = b.answered()
        done, failed_two, took = asyncio.run(_load([a.url, b.url], key, SECONDS))
        two = done / took
        standby = b.answered() - before
    finally:
        for plane in reversed(planes):
            plane.stop()
        for proc in procs:
            proc.terminate()
            proc.wait()
        cluster.destroy()
        shutil.rmtree(root, ignore_errors=True)
    print(f"active_active.one_router_rps: {one:.0f} req/s")
    print(f"active_active.two_routers_rps: {two:.0f} req/s")
    print(f"active_active.scaling: {two / one:.2f} x")
    print(f"active_active.standby_answered: {standby:.0f} requests")
    print(f"active_active.failed: {failed_one + failed_two}")
    if not standby:
        print("active_active: the standby answered none itself: it passed every request to the leader")
    return 0


def main() -> int:
    why = skip_reason()
    if why:
        print(f"active_active: skipped: {why}")
        return 0
    return bench()


if __name__ == "__main__":
    sys.exit(main())
