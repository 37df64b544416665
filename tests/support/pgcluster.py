"""A throwaway PostgreSQL cluster for tests, on a free loopback port.

Tests run against a real server (the Store's PostgreSQL half is asyncpg
talking to PostgreSQL, and nothing else would show its errors or its
locking). initdb refuses to run as root, and CI runs as root, so there the
cluster belongs to the `postgres` user and its tools run through runuser.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import glob
import itertools
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import asyncpg

from llmgw.ports import unused_port

T = TypeVar("T")

USER = "llmgw"


def find_bin() -> str:
    """The bin directory of the newest PostgreSQL installed."""
    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(os.path.join(d, "initdb"))]
    if not found:
        on_path = shutil.which("initdb")
        if on_path:
            return os.path.dirname(on_path)
        raise RuntimeError(
            "the store's tests need PostgreSQL's initdb and pg_ctl, which are not installed "
            "(looked in /usr/lib/postgresql/*/bin and on PATH); run: apt-get install postgresql"
        )
    return max(found, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)


# A database's shape: its relations and columns, indexes, constraints, functions, triggers, schemas and what the
# migrations recorded. A copy given back in the shape it was made in is emptied for the next test; one a test
# changed is dropped.
_SHAPE = """
SELECT 'rel', n.nspname, c.relname, c.relkind::text, c.relpersistence::text, coalesce(a.attname, ''),
       coalesce(format_type(a.atttypid, a.atttypmod), ''), coalesce(a.attnotnull::text, ''),
       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND n.nspname NOT LIKE 'pg_temp%'
  AND n.nspname NOT LIKE 'pg_toast_temp%'
UNION ALL
SELECT 'idx', schemaname, tablename, indexname, indexdef, '', '', '', '' FROM pg_indexes
WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'con', n.nspname, conrelid::regclass::text, conname, pg_get_constraintdef(k.oid), '', '', '', ''
FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'fn', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc), '', '', '', ''
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'trg', '', tgrelid::regclass::text, tgname, tgenabled::text, '', '', '', ''
FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'ns', nspname, '', '', '', '', '', '', '' FROM pg_namespace
WHERE nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast_temp%'
UNION ALL
SELECT 'mig', '', '', '', md5(coalesce(string_agg(m::text, ',' ORDER BY m::text), '')), '', '', '', ''
FROM schema_migrations m
ORDER BY 1, 2, 3, 4, 5, 6
"""


class _Ports:
    """Loopback ports no listener holds, never the same one twice on this machine while their holder lives.

    A port checked free once is free again at the next check: CI saw a
    server's client and metrics listeners given one port, and the server
    refused to start (test_ha, "takes the same port as listen.client"). A
    port stays handed out until the process ends; the range holds thousands
    more than a run uses.

    Other processes pick the same way: xdist's workers, and other test runs
    on the machine. So each port handed out is also leased, as a file
    holding our pid in LEASES, and a port another live process leased is
    passed over; a lease whose process is gone is taken over.

    The ports come from outside the kernel's ephemeral range (llmgw.ports
    says why), so no outgoing connection takes one before its server binds it.
    """

    LEASES = os.path.join(tempfile.gettempdir(), "llmgw-test-ports")

    def __init__(self) -> None:
        self.given: set[int] = set()
        self.leased: list[str] = []

    def take(self) -> int:
        port = unused_port(also=lambda p: p not in self.given and self._lease(p))
        self.given.add(port)
        return port

    def _lease(self, port: int) -> bool:
        if not self.leased:
            os.makedirs(self.LEASES, exist_ok=True)
            atexit.register(self._release)
        path = os.path.join(self.LEASES, str(port))
        # One lock for the look and the write, so two processes never both take over one stale lease.
        with open(os.path.join(self.LEASES, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _alive(_holder(path)):
                return False
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        self.leased.append(path)
        return True

    def _release(self) -> None:
        for path in self.leased:
            if _holder(path) == os.getpid():
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _holder(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


_ports = _Ports()


def free_port() -> int:
    return _ports.take()


class PgCluster:
    """One initdb'd data directory and the server on it.

    `create_database()` gives each test a database of its own, so tests
    share one server yet see nothing of each other. The statements go over one
    connection kept open on a thread of its own: a `createdb` process for
    each of a few hundred store tests cost twice the statement itself on a
    loaded machine, and the fixtures that call this are not async.
    """

    def __init__(self) -> None:
        self.bin = find_bin()
        self.password = secrets.token_hex(12)
        self.port = free_port()
        # Not under pytest's tmp_path: that is private to root, and the
        # postgres user must be able to reach its own data directory.
        self.root = tempfile.mkdtemp(prefix="llmgw-pg-")
        self.data = os.path.join(self.root, "data")
        self.sockets = os.path.join(self.root, "sockets")
        self.log = os.path.join(self.root, "server.log")
        self._names = itertools.count(1)
        self._as: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: asyncpg.Connection | None = None
        # Copies of a template given back by a test and emptied, for the next (copy_of, give_back).
        self._free: dict[str, list[str]] = {}
        self._shapes: dict[str, str] = {}
        os.mkdir(self.sockets)
        pwfile = os.path.join(self.root, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets, pwfile):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._tool(
            "initdb", "-D", self.data, "-U", USER, f"--pwfile={pwfile}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale",
        )
        os.unlink(pwfile)
        self.start()
        # The fixture's teardown stops it; this is for a run that dies before
        # teardown, which would otherwise leave a server behind on the host.
        atexit.register(self.destroy)

    def _tool(self, name: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as, os.path.join(self.bin, name), *args],
            capture_output=True, text=True, timeout=120,
        )
        if done.returncode != 0:
            log = ""
            if os.path.exists(self.log):
                with open(self.log) as f:
                    log = f.read()[-2000:]
            raise RuntimeError(
                f"{name} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n{log}"
            )

    def start(self) -> None:
        # fsync and friends off: a test cluster is thrown away, and durability
        # would only make every CREATE DATABASE and commit slower.
        options = (
            f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        # -l: the server's output goes to a file; left on our pipes it would
        # keep subprocess.run waiting for as long as the server lives.
        self._tool("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._tool("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        return f"postgresql://{USER}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def _admin(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the admin connection's loop and return what it returns."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="pgcluster-admin", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(120)

    async def _execute(self, sql: str) -> None:
        # Closed too when a test stopped and started the server again.
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self.url())
        await self._conn.execute(sql)

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """A new database, empty or a copy of `template`; returns its address (with the password).

        A template must have no session open on it while it is copied
        (PostgreSQL refuses with "being accessed by other users").
        """
        name = name or f"t{next(self._names):05d}"
        sql = f'CREATE DATABASE "{name}"'
        if template:
            sql += f' TEMPLATE "{template}"'
        try:
            self._admin(self._execute(sql))
        except asyncpg.PostgresError as e:
            raise RuntimeError(f"{sql} failed: {e}") from e
        return self.url(name)

    def copy_of(self, template: str) -> str:
        """The address of a database holding what `template` holds (a migrated, empty store): one an earlier test
        gave back and that was emptied (give_back), or a new copy.

        Each CREATE DATABASE … TEMPLATE copies the template's 9 MB, and the DROP after it costs as much again:
        0.05 s of the server's CPU a test, measured, for the thousand store tests a run makes on PostgreSQL, where
        emptying the tables of a copy given back takes 0.005 s (issue 26)."""
        free = self._free.setdefault(template, [])
        if free:
            return self.url(free.pop())
        url = self.create_database(template=template)
        if template not in self._shapes:
            self._shapes[template] = self._admin(self._shape(url.rsplit("/", 1)[1]))
        return url

    def give_back(self, url: str, template: str) -> None:
        """Empty the copy at `url` for the next test, or drop it where it is no longer the template's shape (a test
        changed its schema) or cannot be emptied."""
        name = url.rsplit("/", 1)[1]
        try:
            emptied = self._admin(self._empty(name, self._shapes[template]))
        except (OSError, KeyError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            emptied = False
        if emptied:
            self._free[template].append(name)
        else:
            self.drop_database(name)

    async def _shape(self, name: str) -> str:
        conn = await asyncpg.connect(self.url(name))
        try:
            return "\n".join("\t".join(str(v) for v in row) for row in await conn.fetch(_SHAPE))
        finally:
            await conn.close()

    async def _empty(self, name: str, shape: str) -> bool:
        """Delete every row but the migrations' record, after ending the sessions a test left on it; False (nothing
        done) when the database is not the shape it was made in."""
        await self._execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' "
                            "AND pid <> pg_backend_pid()")
        assert self._conn is not None
        for _ in range(100):  # a terminated session takes a moment to go, and may hold a lock until then
            if not await self._conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name):
                break
            await asyncio.sleep(0.02)
        conn = await asyncpg.connect(self.url(name))
        try:
            if "\n".join("\t".join(str(v) for v in row) for row in await conn.fetch(_SHAPE)) != shape:
                return False
            tables = await conn.fetch("SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables "
                                      "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') "
                                      "AND tablename <> 'schema_migrations'")
            # DELETE rather than TRUNCATE: a test leaves a few rows, and TRUNCATE makes every table's and index's
            # files anew (as dear as a copy). Foreign keys are not checked while the tables empty in any order.
            await conn.execute("SET session_replication_role = replica; "
                               + "".join(f"DELETE FROM {t[0]};" for t in tables))
            return True
        finally:
            await conn.close()

    def drop_database(self, name: str) -> None:
        """Drop `name`, ending the sessions still on it: a test that leaked a connection has ended anyway.

        Each migrated database is about 8 MB on disk; a few hundred of them
        made the cluster's removal at the session's end take minutes.
        """
        self._admin(self._execute(f'DROP DATABASE "{name}" WITH (FORCE)'))

    def _close_admin(self) -> None:
        if self._loop is None:
            return
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                self._admin(conn.close(timeout=5))
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                pass  # the server is being stopped anyway
        self._loop.call_soon_threadsafe(self._loop.stop)

    def destroy(self) -> None:
        self._close_admin()
        try:
            if self.running():
                self._tool("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "-t", "60", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
