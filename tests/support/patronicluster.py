"""A throwaway Patroni cluster for tests: one etcd and two PostgreSQL members on loopback.

Debian's `patroni` and `etcd-server` with its PostgreSQL, each started here
as a child process and ended by its own PID. As in pgcluster.py, PostgreSQL
refuses to run as root, so under root (CI) Patroni runs as the `postgres`
user through runuser and its directories belong to that user.

The timings are Patroni's own (ttl 20, loop_wait 5, retry_timeout 5, as
measured in issue 9), with two choices a site that must lose nothing makes
too, and docs/store.md recommends:
- `synchronous_mode: true`: a commit is acknowledged only once the standby
  has it, so a usage batch the gateway saw committed survives the primary's
  death. Not strict: once the standby is the only one left it writes alone.
- `primary_start_timeout: 0`: a primary whose PostgreSQL died is not
  restarted in place (up to 300 s by default) while clients wait; its
  leader key is given up at once and the standby is promoted.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import yaml

from tests.support.pgcluster import find_bin, free_port

USER = "llmgw"
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 5, 5


def _need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise RuntimeError(
            f"the Patroni test needs {program}, which is not installed; "
            "run: apt-get install patroni etcd-server python3-etcd"
        )
    return found


class Member:
    """One PostgreSQL under one Patroni."""

    def __init__(self, root: str, name: str) -> None:
        self.name = name
        self.port = free_port()
        self.rest_port = free_port()
        self.dir = os.path.join(root, name)
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")
        self.proc: subprocess.Popen | None = None

    def rest(self, path: str) -> tuple[int, dict | None]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}{path}", timeout=2) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return e.code, json.loads(body or b"null")
            except ValueError:
                return e.code, None
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return 0, None

    def is_primary(self) -> bool:
        return self.rest("/primary")[0] == 200

    def postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def output(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""


class PatroniCluster:
    def __init__(self, members: int = 2) -> None:
        self.bin = find_bin()
        self.patroni = _need("patroni")
        self.etcd = _need("etcd")
        self.password = secrets.token_hex(12)
        # Not under pytest's tmp_path, which is private to root (see pgcluster.py).
        self.root = tempfile.mkdtemp(prefix="llmgw-patroni-")
        os.chmod(self.root, 0o755)
        self.scope = f"llmgw-{secrets.token_hex(4)}"
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd_proc: subprocess.Popen | None = None
        self.members = [Member(self.root, f"pg{i}") for i in range(members)]
        self._as: list[str] = []
        self._owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._owner = pwd.getpwnam("postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        atexit.register(self.destroy)

    # the parts

    def start(self, timeout: float = 120) -> PatroniCluster:
        self._start_etcd()
        for member in self.members:
            self._start_member(member)
        self.wait_ready(timeout)
        return self

    def _start_etcd(self) -> None:
        data = os.path.join(self.root, "etcd")
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        self._etcd_log = open(os.path.join(self.root, "etcd.log"), "ab")
        self.etcd_proc = subprocess.Popen(
            [self.etcd, "--name", "e0", "--data-dir", data,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"e0={peer}", "--initial-cluster-state", "new"],
            stdout=self._etcd_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return
            except (urllib.error.URLError, ConnectionError, ValueError):
                pass
            if self.etcd_proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"etcd did not become healthy:\n{self._read(os.path.join(self.root, 'etcd.log'))}")

    def _member_config(self, member: Member) -> dict:
        return {
            "scope": self.scope,
            "name": member.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{member.rest_port}",
                        "connect_address": f"127.0.0.1:{member.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "primary_start_timeout": 0,
                    "postgresql": {"use_pg_rewind": False, "parameters": {"max_connections": 100}},
                },
                "initdb": [{"encoding": "UTF8"}, "no-locale"],
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 127.0.0.1/32 scram-sha-256",
                    "host all all 127.0.0.1/32 scram-sha-256",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{member.port}",
                "connect_address": f"127.0.0.1:{member.port}",
                "data_dir": member.data,
                "bin_dir": self.bin,
                "pgpass": os.path.join(member.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": USER, "password": self.password},
                    "replication": {"username": "replicator", "password": self.password},
                },
                # The sockets beside the data, not /var/run/postgresql, which
                # may be missing or someone else's.
                "parameters": {"unix_socket_directories": member.dir},
            },
        }

    def _start_member(self, member: Member) -> None:
        os.makedirs(member.dir, mode=0o700, exist_ok=True)
        with open(member.config, "w") as f:
            yaml.safe_dump(self._member_config(member), f, sort_keys=False)
        if self._owner is not None:
            for path in (member.dir, member.config):
                os.chown(path, self._owner.pw_uid, self._owner.pw_gid)
        log = open(member.log, "ab")
        # A session of its own: the test SIGKILLs PostgreSQL, not Patroni,
        # and a Ctrl-C at the terminal must not reach it before destroy().
        member.proc = subprocess.Popen([*self._as, self.patroni, member.config],
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    # what the test asks

    def primary(self) -> Member | None:
        for member in self.members:
            if member.is_primary():
                return member
        return None

    def wait_ready(self, timeout: float) -> None:
        """Until one member leads and every other streams from it as the synchronous standby."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            primary = self.primary()
            if primary is not None:
                _, cluster = primary.rest("/cluster")
                members = (cluster or {}).get("members", [])
                roles = sorted(m.get("role", "") for m in members if m.get("state") in ("running", "streaming"))
                if len(roles) == len(self.members) and "sync_standby" in roles:
                    return
            for member in self.members:
                if member.proc is not None and member.proc.poll() is not None:
                    raise RuntimeError(f"patroni {member.name} exited:\n{member.output()}")
            time.sleep(0.5)
        raise RuntimeError("the Patroni cluster did not form in time:\n"
                           + "\n".join(f"--- {m.name}\n{m.output()}" for m in self.members))

    def url(self, database: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        return f"postgresql://{USER}:{self.password}@{hosts}/{database}?target_session_attrs=read-write"

    def create_database(self, name: str) -> None:
        primary = self.primary()
        assert primary is not None, "no primary to create a database on"
        done = subprocess.run(
            [os.path.join(self.bin, "createdb"), "-h", "127.0.0.1", "-p", str(primary.port), "-U", USER, name],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PGPASSWORD": self.password})
        if done.returncode != 0:
            raise RuntimeError(f"createdb {name} failed: {done.stderr}")

    def kill_postgres(self, member: Member) -> int:
        """SIGKILL the member's postmaster (not Patroni): a crash, as the kernel's OOM killer would do it."""
        pid = member.postmaster_pid()
        assert pid is not None, f"{member.name} has no postmaster.pid"
        os.kill(pid, signal.SIGKILL)
        return pid

    # the end

    def destroy(self) -> None:
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                # Patroni stops its PostgreSQL on SIGTERM; wait for that, then make sure.
                member.proc.send_signal(signal.SIGTERM)
                try:
                    member.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    member.proc.kill()
                    member.proc.wait(timeout=10)
            pid = member.postmaster_pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.etcd_proc is not None and self.etcd_proc.poll() is None:
            self.etcd_proc.terminate()
            try:
                self.etcd_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.etcd_proc.kill()
                self.etcd_proc.wait(timeout=10)
            self._etcd_log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""
