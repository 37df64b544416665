"""The three-machine store as llmgw writes it, started for real on loopback.

Each of three "machines" is a directory (a Layout root) into which
llmgw.onboard.hastore.setup_machine writes that machine's files: etcd's
environment file, and on the machines carrying PostgreSQL, patroni.yml,
the bootstrap script and llmgw's password. Then each etcd is started with
the variables of its own environment file, as Debian's etcd.service would,
and each Patroni with its own patroni.yml, as Debian's patroni.service
would: what is tested is the product's files, not a test's own.

All three are on 127.0.0.1, so each is given ports of its own. Under root
Patroni runs as `postgres` through runuser (PostgreSQL refuses root), and
every process is ended by its own PID.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llmgw.onboard import hastore, patroni
from llmgw.onboard.layout import Layout
from llmgw.onboard.patroni import StoreMachine, StorePorts, StoreSecrets
from llmgw.onboard.steps import Progress
from llmgw.onboard.units import read_environment
from tests.support.pgcluster import free_port
from tests.support.waiting import wait_until


def _need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise RuntimeError(f"the three-machine store test needs {program}, which is not installed; "
                           "run: apt-get install patroni etcd-server python3-etcd postgresql")
    return found


def _get(url: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return 0, None


class StoreMachines:
    def __init__(self, postgres_on: int = 2) -> None:
        self.etcd = _need("etcd")
        self.patroni = _need("patroni")
        if not os.path.exists(os.path.join(patroni.BIN_DIR, "initdb")):
            raise RuntimeError(f"the three-machine store test needs PostgreSQL {patroni.PG_VERSION} in "
                               f"{patroni.BIN_DIR}; run: apt-get install postgresql-{patroni.PG_VERSION}")
        # Not under pytest's tmp_path, which is private to root: Patroni runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="llmgw-store-"))
        os.chmod(self.root, 0o755)
        self.machines = [
            StoreMachine(f"cp-{i + 1}", "127.0.0.1", postgres=i < postgres_on,
                         ports=StorePorts(free_port(), free_port(), free_port(), free_port()))
            for i in range(3)]
        self.layouts = {m.name: Layout(self.root / m.name) for m in self.machines}
        self.secrets = StoreSecrets.load_or_make(self.layouts["cp-1"].at(patroni.SECRETS_DIR))
        self.said: list[Progress] = []
        self.procs: dict[str, subprocess.Popen] = {}
        as_postgres = os.geteuid() == 0
        self._as = ["runuser", "-u", "postgres", "--"] if as_postgres else []
        atexit.register(self.destroy)

    def write(self) -> list[Progress]:
        said: list[Progress] = []
        for m in self.machines:
            hastore.setup_machine(self.layouts[m.name], self.machines, m, self.secrets, said.append)
        self.said += said
        return said

    def start(self, timeout: float = 120) -> StoreMachines:
        self.write()
        for m in self.machines:
            self._start_etcd(m)
        wait_until(lambda: all(self._etcd_healthy(m) for m in self.machines), 60,
                   "the three etcd members agree on a leader")
        for m in self.machines:
            if m.postgres:
                self._start_patroni(m)
        wait_until(self._formed, timeout, "one PostgreSQL leads and the other streams from it")
        return self

    def _start_etcd(self, m: StoreMachine) -> None:
        env_file = self.layouts[m.name].at(patroni.ETCD_ENVIRONMENT)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               **read_environment(env_file.read_text())}
        log = open(self.layouts[m.name].root / "etcd.log", "ab")
        self.procs[f"etcd {m.name}"] = subprocess.Popen([self.etcd], env=env, stdout=log, stderr=subprocess.STDOUT,
                                                        start_new_session=True)
        log.close()

    def _etcd_healthy(self, m: StoreMachine) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{self.output(m)}")
        status, body = _get(f"http://127.0.0.1:{m.ports.etcd_client}/health")
        return status == 200 and (body or {}).get("health") == "true"

    def _start_patroni(self, m: StoreMachine) -> None:
        layout = self.layouts[m.name]
        log = open(layout.root / "patroni.log", "ab")
        os.chmod(layout.root, 0o755)
        self.procs[f"patroni {m.name}"] = subprocess.Popen(
            [*self._as, self.patroni, str(layout.at(patroni.PATRONI_CONFIG))],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def rest(self, m: StoreMachine, path: str) -> tuple[int, dict | None]:
        return _get(f"http://127.0.0.1:{m.ports.patroni}{path}")

    def primary(self) -> StoreMachine | None:
        return next((m for m in self.machines if m.postgres and self.rest(m, "/primary")[0] == 200), None)

    def _formed(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n" + "\n".join(self.output(m) for m in self.machines))
        primary = self.primary()
        if primary is None:
            return False
        _, cluster = self.rest(primary, "/cluster")
        members = (cluster or {}).get("members", [])
        running = [mm for mm in members if mm.get("state") in ("running", "streaming")]
        # Formed means as the configuration promises: with synchronous_mode a standby streams *and* has been
        # named the synchronous one, which the primary's Patroni does one loop (loop_wait) after the standby
        # first streams. Before that no member may be promoted, so a primary that crashes in that window is
        # restarted in place; a failover test that kills it then waits for a promotion that cannot come.
        synchronous = any(mm.get("role") == "sync_standby" for mm in members)
        postgres = sum(m.postgres for m in self.machines)
        return len(running) == postgres and (synchronous or postgres < 2)

    def data_dir(self, m: StoreMachine) -> str:
        return hastore.paths_for(self.layouts[m.name]).data_dir

    @property
    def url(self) -> str:
        """The `store:` llmgw writes for the three: every PostgreSQL host, writes to the primary."""
        return patroni.store_address(self.machines, self.secrets)

    def kill_postgres(self, m: StoreMachine) -> int:
        """SIGKILL the member's postmaster (not Patroni): a crash, as the kernel's OOM killer would do it."""
        with open(os.path.join(self.data_dir(m), "postmaster.pid")) as f:
            pid = int(f.readline())
        os.kill(pid, signal.SIGKILL)
        return pid

    def members(self) -> list[dict]:
        primary = self.primary()
        assert primary is not None
        return (self.rest(primary, "/cluster")[1] or {}).get("members", [])

    def config(self, m: StoreMachine) -> dict:
        return yaml.safe_load(self.layouts[m.name].at(patroni.PATRONI_CONFIG).read_text())

    def output(self, m: StoreMachine) -> str:
        out = []
        for what in ("etcd.log", "patroni.log"):
            path = self.layouts[m.name].root / what
            if path.exists():
                out.append(f"--- {m.name} {what}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def destroy(self) -> None:
        patronis = [(n, p) for n, p in self.procs.items() if n.startswith("patroni")]
        etcds = [(n, p) for n, p in self.procs.items() if n.startswith("etcd")]
        # Patroni first (it stops its PostgreSQL on SIGTERM, and needs etcd to give up its key), then etcd.
        for _, proc in patronis + etcds:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        for m in self.machines:
            pid_file = Path(self.data_dir(m)) / "postmaster.pid"
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def started(postgres_on: int = 2) -> Iterator[StoreMachines]:
    """A module fixture's body: the three machines started, yielded, destroyed. A machine without etcd, Patroni
    or PostgreSQL fails the test, never skips it: a skipped store test passes while the store goes untested."""
    try:
        machines = StoreMachines(postgres_on=postgres_on)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        machines.start()
        yield machines
    finally:
        machines.destroy()
