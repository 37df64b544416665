"""A simulated cluster on one leader: 1,000 agents over real WebSockets, 5,000 replicas, what the leader pays.

A real `llmgw server` (SQLite in a temporary directory, loopback ports) and,
in this one process, 1,000 simulated agents: each the agent's own
ClusterLink — mutual TLS with a node certificate of its own, Register,
a Heartbeat every 5 s, StartShard answered — with a Shards that reports a
replica starting and then ready at once instead of running an engine, and a
Hardware that describes a 64-core, 512 GB machine with its load. What is
measured is the leader under that: the TLS handshakes and registrations, the
reconciler placing 5,000 replicas and taking 10,000 status reports, its
steady passes, and the heartbeats.

Certificates. A few nodes join through the real flow (`llmgw node add`'s
admin API call, then `llmgw.trust.joining.join`), timed as
`cluster_join_ms`; at ~that each, 1,000 would not fit a bench's minute. The
rest are issued here from the cluster's own CA, whose key is sealed in the
store under the server's master key: this bench started the server, so it
reads DATA/master-key — what an administrator could do, never what a node
can. Each node then dials with its own client context
(`client_ssl_context(its data dir)`), so 1,000 handshakes are part of
`cluster_connect_s`.

Prints:
  cluster_join_ms: one node joined through the real flow (join code, CA, CSR signed), the median
  cluster_connect_s: from the first dial to every agent registered and welcomed
  cluster_place_all_s: from the first model added to every replica ready in the admin API (the leader
      reads the catalog at least every 2 s: up to 2 s of it is that wait)
  cluster_place_pass_ms: the leader's mean reconcile pass while it placed them
  cluster_reconcile_pass_ms: the leader's mean reconcile pass in steady state (llmgw_reconcile_pass_seconds)
  cluster_leader_cpu_percent: the server process's CPU in steady state, % of one core
  cluster_leader_cpu_per_heartbeat_round_ms: the same, per round of one heartbeat from every agent
      (all of the leader's steady CPU: the heartbeats and the passes that write them and look again)
  cluster_leader_rss_mb: the server's resident memory at the end
  cluster_agents_cpu_percent: this process's CPU (the 1,000 agents) in steady state, for context

`--agents`, `--models`, `--replicas-each`, `--steady` and `--joins` make it
smaller (tests/benchmark/test_cluster.py runs 20 agents).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

import psutil

from llmgw.agent.link import ClusterLink
from llmgw.control.adminclient import AdminClient, AdminError
from llmgw.ports import unused_port
from llmgw.protocol import Heartbeat, Host, NodeLogs, ShardLoad, ShardStatus, Storage
from llmgw.store import open_store
from llmgw.trust import TrustError, client_ssl_context, join, node_identity, pki, read_master_key
from llmgw.trust.authority import CA_KEY_PURPOSE
from llmgw.trust.masterkey import FILE_NAME as MASTER_KEY_FILE
from llmgw.trust.tls import node_files

TB = 10**12


# Ports this bench gave out: a port bound to 0 and let go at once could come back for the next role, and did
# beside another suite (listen.metrics took listen.client's port; the loaded fresh-clone run v05 of 16d3f80).
_GIVEN: set[int] = set()


def _free_port() -> int:
    """A port nothing holds, from outside the kernel's ephemeral range (llmgw.ports), never one given already."""
    port = unused_port(also=lambda p: p not in _GIVEN)
    _GIVEN.add(port)
    return port


# --- the simulated node ------------------------------------------------------------------------


@dataclass
class Counts:
    heartbeats: int = 0
    starts: int = 0  # StartShard acted on, first time for each shard


class SimHardware:
    """A 64-core, 512 GB machine with one NVMe disk, a little busy."""

    def __init__(self, name: str, counts: Counts):
        self.name, self.counts = name, counts

    def describe(self):
        host = Host(hostname=self.name, os="Debian GNU/Linux 12 (bookworm)", kernel="6.1.0-28-amd64", arch="x86_64",
                    cpu_model="AMD EPYC 9354 32-Core Processor", cpu_cores=64, cpu_threads=128,
                    memory_mb=512 * 1024, mem_bandwidth_gbs=180.0)
        return host, [], [self._disk()]

    def _disk(self) -> Storage:
        return Storage("/var/lib/llmgw", "/dev/nvme0n1p2", 2 * TB, int(1.4 * TB))

    def sample(self) -> Heartbeat:
        self.counts.heartbeats += 1
        return Heartbeat(0.0, cpu_percent=12.5, load1=7.9, memory_used_mb=96 * 1024,
                         memory_available_mb=416 * 1024, mem_bandwidth_gbs=180.0, storage=[self._disk()])


class SimShards:
    """A node's shards without engines: a StartShard is reported starting, then ready, at once."""

    def __init__(self, url: str, counts: Counts):
        self.updates: asyncio.Queue = asyncio.Queue()
        self.running: dict[str, ShardStatus] = {}
        self.url, self.counts = url, counts

    def statuses(self):
        return list(self.running.values())

    def loads(self):
        return [ShardLoad(s, cpu_percent=2.0, rss_mb=1100) for s in self.running]

    def engines(self):
        return {"sim": "1", "llamacpp": "b6000"}

    async def start(self, message):
        if message.shard_id in self.running:
            return  # idempotent by shard id, as the real one
        self.counts.starts += 1
        now = time.time()
        await self.updates.put(ShardStatus(message.shard_id, "starting", message.profile.model, since=now))
        ready = ShardStatus(message.shard_id, "ready", message.profile.model, url=self.url,
                            pid=100000 + self.counts.starts, since=now)
        self.running[message.shard_id] = ready
        await self.updates.put(ready)

    async def stop(self, message):
        status = self.running.pop(message.shard_id, None)
        if status is not None:
            await self.updates.put(ShardStatus(message.shard_id, "stopped", status.model, since=time.time()))

    async def remove_weights(self, message):
        pass

    async def logs(self, message):
        return NodeLogs(message.request_id, message.source, [])


# --- the server --------------------------------------------------------------------------------


class Server:
    """`llmgw server` on loopback with a SQLite store in `root`, ended by its PID."""

    def __init__(self, root: str):
        self.root = root
        self.data_dir = os.path.join(root, "server")
        self.ports = {role: _free_port() for role in ("client", "agent", "admin", "metrics")}
        self.store = f"sqlite:{os.path.join(self.data_dir, 'llmgw.db')}"
        self.log_path = os.path.join(root, "server.log")
        self.proc: subprocess.Popen | None = None

    def args(self) -> list[str]:
        args = ["--name", "bench-cp", "--data-dir", self.data_dir, "--store", self.store]
        for role, port in self.ports.items():
            args += [f"--listen-{role}", f"127.0.0.1:{port}"]
        return args

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the server has not been started")
        return self.proc.pid

    @property
    def agent_address(self) -> str:
        return f"127.0.0.1:{self.ports['agent']}"

    def start(self) -> None:
        os.makedirs(self.data_dir)
        py = [sys.executable, "-m", "llmgw", "server"]
        init = subprocess.run([*py, "init", *self.args(), "--json"], capture_output=True, text=True, timeout=60)
        if init.returncode != 0:
            raise RuntimeError(f"llmgw server init failed: {init.stderr.strip()}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*py, *self.args()], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._leads():
            if self.proc.poll() is not None:
                raise RuntimeError(f"llmgw server exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"llmgw server did not lead within 30 s:\n{self.tail()}")
            time.sleep(0.1)
        self.admin = AdminClient(f"127.0.0.1:{self.ports['admin']}", os.path.join(self.data_dir, "admin-token"))

    def _leads(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['client']}/leader", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def pass_seconds(self) -> tuple[float, float]:
        """(sum, count) of llmgw_reconcile_pass_seconds from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=10) as r:
            text = r.read().decode()
        found = dict(re.findall(r"^llmgw_reconcile_pass_seconds_(sum|count) (\S+)$", text, re.M))
        if len(found) != 2:
            raise RuntimeError("the server's /metrics has no llmgw_reconcile_pass_seconds")
        return float(found["sum"]), float(found["count"])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


# --- certificates ------------------------------------------------------------------------------


def join_for_real(server: Server, nodes_dir: str, count: int) -> tuple[list[str], list[float]]:
    """`count` nodes through `llmgw node add` + `llmgw join`: their data dirs, and each one's milliseconds."""
    dirs, took = [], []
    for i in range(count):
        data_dir = os.path.join(nodes_dir, f"joined-{i:04d}")
        started = time.perf_counter()
        made = server.admin.call("POST", "/api/v1/nodes/join-codes", {"name": f"sim-{i:04d}"})
        join(made["code"], data_dir, os.path.join(data_dir, "agent.yaml"))
        took.append((time.perf_counter() - started) * 1000)
        dirs.append(data_dir)
    return dirs, took


async def issue_here(server: Server, nodes_dir: str, first: int, count: int) -> list[str]:
    """Node certificates signed here with the cluster's CA, written as `llmgw join` writes them."""
    key = read_master_key(os.path.join(server.data_dir, MASTER_KEY_FILE))
    store = await open_store(server.store, migrate=False)
    try:
        ca = await store.get_cluster_ca()
    finally:
        await store.close()
    if ca is None:
        raise RuntimeError("the server's store has no cluster CA to sign node certificates with; did `llmgw server "
                           "init` run?")
    ca_cert, ca_key = pki.load_cert(ca.cert_pem), pki.load_key(key.unseal(ca.key_sealed, CA_KEY_PURPOSE))
    dirs = []
    for i in range(first, first + count):
        data_dir = os.path.join(nodes_dir, f"issued-{i:04d}")
        os.makedirs(data_dir)
        node_key = pki.new_key()
        cert = pki.sign_node(ca_cert, ca_key, pki.make_csr(node_key, f"sim-{i:04d}"), f"node_{secrets.token_hex(8)}")
        ca_file, cert_file, key_file = node_files(data_dir)
        for path, data in ((ca_file, ca.cert_pem.encode()), (cert_file, pki.cert_pem(cert).encode()),
                           (key_file, pki.key_pem(node_key))):
            with open(path, "wb") as f:
                f.write(data)
        dirs.append(data_dir)
    return dirs


# --- the run -----------------------------------------------------------------------------------


def _model(i: int, replicas: int) -> dict:
    return {"name": f"sim-{i:03d}", "context_length": 4096,
            "profiles": [{"engine": "sim", "cpu_cores": 1, "memory": "2GB"}], "scaling": {"min": replicas}}


async def _until(predicate, timeout: float, what: str, every: float = 0.05) -> float:
    started = time.monotonic()
    while not await predicate():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
        await asyncio.sleep(every)
    return time.monotonic() - started


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


@dataclass
class Snapshot:
    """The counters a steady-state window is measured between."""

    at: float
    passes: tuple[float, float]  # llmgw_reconcile_pass_seconds (sum, count)
    leader_cpu: float  # the server process's CPU seconds
    own_cpu: float  # this process's: the agents'
    heartbeats: int

    @classmethod
    async def take(cls, server: Server, leader: psutil.Process, counts: Counts) -> Snapshot:
        passes = await asyncio.to_thread(server.pass_seconds)
        return cls(time.monotonic(), passes, _cpu(leader), _cpu(psutil.Process()), counts.heartbeats)


async def run(args: argparse.Namespace, server: Server, root: str) -> None:
    total = args.models * args.replicas_each
    nodes_dir = os.path.join(root, "nodes")
    joins = min(args.joins, args.agents)
    print(f"{args.agents} simulated agents (64 cores, 512 GB each), {args.models} sim models x "
          f"{args.replicas_each} replicas = {total}; steady state measured over {args.steady:g} s", flush=True)

    joined, join_ms = await asyncio.to_thread(join_for_real, server, nodes_dir, joins)
    issued = await issue_here(server, nodes_dir, joins, args.agents - joins)
    dirs = joined + issued
    print(f"{joins} nodes joined through the real flow, {len(issued)} issued here from the cluster's CA "
          f"(unsealed with {MASTER_KEY_FILE})", flush=True)

    counts = Counts()
    # Every replica's engine "answers" at one address where nothing listens. The leader's router
    # reads each ready engine's /metrics every 2 s (llmgw/router/scrape.py), by URL: with one URL
    # that is one refused connection a round, backing off, so what is measured is the reconciler
    # and the agents' links, not 5,000 engines' metrics pages (a cost of its own, not measured here).
    engine_url = f"http://127.0.0.1:{_free_port()}/v1"
    links = [ClusterLink(node_id=node_identity(d).node_id, name=f"sim-{i:04d}", control_planes=[server.agent_address],
                         ssl=client_ssl_context(d), hardware=SimHardware(f"sim-{i:04d}", counts),
                         shards=SimShards(engine_url, counts))
             for i, d in enumerate(dirs)]
    tasks = []
    try:
        started = time.monotonic()
        tasks = [asyncio.create_task(link.run(), name=f"agent {link.name}") for link in links]

        async def all_connected() -> bool:
            for task in tasks:
                if task.done():
                    task.result()  # an agent that gave up raises here
            return all(link.connected.is_set() for link in links)

        await _until(all_connected, args.deadline, f"all {args.agents} agents registering")
        connect_s = time.monotonic() - started

        before_place = await asyncio.to_thread(server.pass_seconds)
        started = time.monotonic()
        for i in range(args.models):
            spec = _model(i, args.replicas_each)
            await asyncio.to_thread(server.admin.call, "POST", "/api/v1/models", {"spec": spec})

        async def all_started() -> bool:
            return counts.starts >= total

        await _until(all_started, args.deadline, f"all {total} replicas started on the agents")

        async def all_ready() -> bool:
            rows = await asyncio.to_thread(server.admin.call, "GET", "/api/v1/replicas")
            return sum(1 for r in rows if r["state"] == "ready") >= total

        await _until(all_ready, args.deadline, f"all {total} replicas ready in the admin API", every=0.25)
        place_s = time.monotonic() - started
        after_place = await asyncio.to_thread(server.pass_seconds)

        # Every report written and a pass or two over the settled cluster before the window opens.
        await asyncio.sleep(min(3.0, args.steady))
        leader = psutil.Process(server.pid)
        first = await Snapshot.take(server, leader, counts)
        await asyncio.sleep(args.steady)
        last = await Snapshot.take(server, leader, counts)
        rss_mb = leader.memory_info().rss / 2**20
        lost = sum(1 for link in links if not link.connected.is_set())
        if lost:
            raise RuntimeError(f"{lost} agents lost their link during the steady state")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def mean_ms(a: tuple[float, float], b: tuple[float, float]) -> float:
        n = b[1] - a[1]
        return (b[0] - a[0]) / n * 1000 if n else float("nan")

    window = last.at - first.at
    beats = last.heartbeats - first.heartbeats
    rounds = beats / args.agents
    leader_cpu = last.leader_cpu - first.leader_cpu
    print(f"{beats} heartbeats ({rounds:.1f} rounds) and {last.passes[1] - first.passes[1]:.0f} reconcile passes "
          f"in {window:.1f} s of steady state; {after_place[1] - before_place[1]:.0f} passes while placing", flush=True)
    if joins:
        print(f"cluster_join_ms: {statistics.median(join_ms):.1f} ms")
    print(f"cluster_connect_s: {connect_s:.2f} s")
    print(f"cluster_place_all_s: {place_s:.2f} s")
    print(f"cluster_place_pass_ms: {mean_ms(before_place, after_place):.1f} ms")
    print(f"cluster_reconcile_pass_ms: {mean_ms(first.passes, last.passes):.1f} ms")
    print(f"cluster_leader_cpu_percent: {leader_cpu / window * 100:.1f} %")
    per_round = leader_cpu / rounds * 1000 if rounds else float("nan")
    print(f"cluster_leader_cpu_per_heartbeat_round_ms: {per_round:.1f} ms")
    print(f"cluster_leader_rss_mb: {rss_mb:.0f} MB")
    print(f"cluster_agents_cpu_percent: {(last.own_cpu - first.own_cpu) / window * 100:.1f} %", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--replicas-each", type=int, default=100)
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of steady state measured")
    parser.add_argument("--joins", type=int, default=5, help="nodes joined through the real flow, timed")
    parser.add_argument("--deadline", type=float, default=40.0, help="seconds any one phase may take")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        pass
    else:
        uvloop.install()
    root = tempfile.mkdtemp(prefix="llmgw-bench-cluster-")
    server = Server(root)
    try:
        server.start()
        asyncio.run(run(args, server, root))
        return 0
    except (RuntimeError, OSError, AdminError, TrustError) as e:
        print(f"bench_cluster: {e}", file=sys.stderr)
        tail = server.tail()
        if tail:
            print(f"the server's log ends:\n{tail}", file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
