"""The embedded store: one SQLite file, driven by apsw on a thread of its own.

Why apsw and not aiosqlite or the sqlite3 module: apsw leaves transactions
to us (sqlite3 opens them implicitly before some statements and not others,
which has bitten every project that relied on its guesses), and it carries
a current SQLite (upserts with RETURNING, the fixes of recent years)
whatever the host's libsqlite3 is. apsw is synchronous, so the connection
lives on ONE worker thread that this module owns (a single-worker
ThreadPoolExecutor): every statement runs there, in order, and the event
loop only awaits. An asyncio lock keeps a transaction's statements together
so no other coroutine's statement lands inside it.

The file is in WAL mode (readers never wait for the writer), with
synchronous=NORMAL (a power cut may lose the last commits, never corrupt
the file), foreign keys on, and a busy timeout so another process holding
the write lock is waited for rather than failed at once.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any, TypeVar, TypeVarTuple

import apsw

from llmgw.store import Store
from llmgw.store.driver import Duplicate, MissingParent, Row, Statements
from llmgw.store.errors import StoreError, StoreUnavailable
from llmgw.store.migrate import bring_up_to_date
from llmgw.store.sql import SQLStore

# The database's clock as epoch seconds. julianday('now') is fixed for the
# length of one statement, so both uses in the lease's upsert agree.
NOW = "((julianday('now') - 2440587.5) * 86400.0)"

_PARAM = re.compile(r"\$(\d+)")

# What one piece of work on the store's thread takes and gives back.
_Args = TypeVarTuple("_Args")
_Result = TypeVar("_Result")


# The rewrite does not look inside string literals; the store's SQL passes
# values as parameters and never spells a "$" in a literal.
@lru_cache(maxsize=1024)
def _dialect(sql: str) -> str:
    return _PARAM.sub(r"?\1", sql.replace("{now}", NOW))


def sqlite_path(url: str) -> str:
    """The file of a `sqlite:PATH` address (`sqlite:///abs` is read as /abs)."""
    path = url[len("sqlite:"):]
    if path.startswith("//"):
        path = path[2:]
    if not path:
        raise StoreError(f'the store address "{url}" names no file; write sqlite:/var/lib/llmgw/llmgw.db')
    return path


class _Tx(Statements):
    """Statements inside the driver's open transaction (its lock is held)."""

    def __init__(self, driver: SQLiteDriver) -> None:
        self._driver = driver

    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        return await self._driver._run(self._driver._rows, sql, args)

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._driver._run(self._driver._rows_many, sql, rows)

    async def script(self, sql: str) -> None:
        await self._driver._run(self._driver._script, sql)


class SQLiteDriver(Statements):
    dialect = "sqlite"

    def __init__(self, url: str, path: str, timeout: float) -> None:
        self.url = url
        self._path = path
        self._timeout = timeout
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmgw-sqlite")
        self._lock = asyncio.Lock()
        self._conn: apsw.Connection | None = None

    # on the store's thread

    def _connect(self) -> None:
        if self._path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self._path))
            os.makedirs(parent, mode=0o700, exist_ok=True)
            # The store holds password and key hashes: only its owner may read
            # it. SQLite gives its -wal and -shm files the same mode.
            os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600))
        conn = apsw.Connection(self._path)
        conn.setbusytimeout(int(self._timeout * 1000))
        # Switching a new file to WAL needs a lock that SQLite refuses at once,
        # without its busy handler, while another connection is part-way
        # through a write (seen with several control planes opening one fresh
        # file and migrating it): so wait here as the busy timeout would.
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchall()
                break
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._conn = conn

    def _open(self) -> apsw.Connection:
        # _run refuses work once the store is closed, and closing is itself
        # the last work this thread is given; so the work it does finds the
        # connection open.
        if self._conn is None:
            raise StoreError(f"the store at {self.url} is closed")
        return self._conn

    def _rows(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        return self._open().execute(_dialect(sql), tuple(args) or None).fetchall()

    def _rows_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._open().executemany(_dialect(sql), [tuple(r) for r in rows]).fetchall()

    def _script(self, sql: str) -> None:
        self._open().execute(sql).fetchall()

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # on the event loop

    async def _run(self, fn: Callable[[*_Args], _Result], *args: *_Args) -> _Result:
        if self._conn is None and fn != self._connect:
            raise StoreError(f"the store at {self.url} is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, fn, *args)
        except apsw.Error as e:
            raise self._translate(e) from e
        except OSError as e:
            raise StoreError(
                f"the store at {self.url} cannot be opened ({e.strerror or e}); "
                "check that llmgw may write to that directory"
            ) from e

    def _translate(self, e: apsw.Error) -> Exception:
        if isinstance(e, apsw.ConstraintError):
            text = str(e)
            if "UNIQUE" in text or "PRIMARY KEY" in text:
                return Duplicate(text)
            if "FOREIGN KEY" in text:
                return MissingParent(text)
        if isinstance(e, (apsw.BusyError, apsw.LockedError)):
            return StoreUnavailable(
                f"the store at {self.url} stayed locked by another process for "
                f"{self._timeout:g} s; is a second llmgw using the same file?"
            )
        if isinstance(e, apsw.CantOpenError):
            return StoreUnavailable(
                f"the store at {self.url} cannot be opened; check that the file "
                "and its directory exist and llmgw may write there"
            )
        if isinstance(e, apsw.NotADBError):
            return StoreError(f"the store at {self.url} is not an SQLite database")
        if isinstance(e, apsw.FullError):
            return StoreUnavailable(f"the disk under the store at {self.url} is full; free some room")
        if isinstance(e, apsw.ReadOnlyError):
            return StoreError(f"the store at {self.url} is read-only; check its file's permissions")
        return StoreError(f"the store at {self.url} refused a statement: {e}")

    async def open(self) -> None:
        await self._run(self._connect)

    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        async with self._lock:
            return await self._run(self._rows, sql, args)

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._lock:
            await self._run(self._rows_many, sql, rows)

    async def script(self, sql: str) -> None:
        async with self._lock:
            await self._run(self._script, sql)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Statements]:
        async with self._lock:
            # IMMEDIATE takes the write lock at the start: a transaction that
            # reads and then writes cannot then fail half-way because another
            # process began writing in between.
            await self._run(self._rows, "BEGIN IMMEDIATE", ())
            try:
                yield _Tx(self)
                await self._run(self._rows, "COMMIT", ())
            except BaseException:
                if self._conn is not None and not self._conn.getautocommit():
                    await self._run(self._rows, "ROLLBACK", ())
                raise

    async def lock_schema(self, tx: Statements) -> None:
        # BEGIN IMMEDIATE already holds SQLite's one write lock.
        return None

    async def table_exists(self, name: str) -> bool:
        found = await self.fetchval(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1", name
        )
        return found is not None

    async def close(self) -> None:
        if self._conn is None:
            return
        async with self._lock:
            await self._run(self._disconnect)
        self._thread.shutdown(wait=False)


async def open_sqlite(url: str, migrate: bool = True, timeout: float = 3.0) -> Store:
    """Open (creating if missing) the SQLite store at `sqlite:PATH`."""
    driver = SQLiteDriver(url, sqlite_path(url), timeout)
    try:
        await driver.open()
        await bring_up_to_date(driver, apply=migrate)
    except BaseException:
        await driver.close()
        driver._thread.shutdown(wait=False)
        raise
    return SQLStore(driver)
