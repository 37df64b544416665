"""The shared store: PostgreSQL through asyncpg, for several control planes.

A small pool (1 to 10 connections): the hot path never waits on the store,
so what reaches it is the usage writer's batches, the lease every few
seconds, the settings poll and the administrators' reads. When PostgreSQL
goes away (a restart, a Patroni failover) every call raises StoreUnavailable
with a sentence rather than asyncpg's own exception, and the pool reconnects
by itself on the next call once the server is back.

Under Patroni the address lists every member and asks for
`target_session_attrs=read-write`; asyncpg tries the hosts in order and
keeps the first that takes writes. When the store fails, every pooled
connection is marked to be replaced, so none lingers on a primary that has
since been demoted: each new one is made through the host list again and
lands on the new primary (docs/store.md, "Running on Patroni").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from llmgw.config import postgres_hosts, redact_url
from llmgw.store import Store
from llmgw.store.driver import Duplicate, MissingParent, Row, Statements
from llmgw.store.errors import StoreError, StoreUnavailable
from llmgw.store.migrate import bring_up_to_date
from llmgw.store.sql import SQLStore

# The database's clock as epoch seconds, read at each use (clock_timestamp,
# not now(), which is frozen at the start of a transaction). extract() gives
# numeric since PostgreSQL 14; the cast keeps arithmetic in float8 like the
# columns.
NOW = "CAST(extract(epoch FROM clock_timestamp()) AS DOUBLE PRECISION)"

# Every process migrating a store takes this advisory lock first; any fixed
# number works as long as no other program on the database uses it.
_SCHEMA_LOCK = 0x6C6C6D67770001  # "llmgw" + 1

# A statement that runs longer than this is taken for a server that has gone
# silent (a partition leaves TCP open, with nothing answering).
COMMAND_TIMEOUT = 30.0
# Migrations may rebuild a large table; they get their own, far longer, bound.
SCRIPT_TIMEOUT = 3600.0


class _NoTraceback(logging.Filter):
    """asyncpg's pool logs a traceback each time it fails to reconnect its
    floor of connections (min_size) while the server is away: a screenful
    every second or more through a failover. llmgw's own lines already say
    the store is away, in a sentence; asyncpg's is kept, without the stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            reason = unavailable_reason(record.exc_info[1]) if record.exc_info[1] else None
            if reason is not None:
                record.msg = f"{record.getMessage()} (the store {reason})"
                record.args = None
                record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("asyncpg.pool").addFilter(_NoTraceback())


def _sql(sql: str) -> str:
    return sql.replace("{now}", NOW)


class _Tx(Statements):
    """Statements on the one connection that holds a transaction."""

    def __init__(self, conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record], driver: PostgresDriver) -> None:
        self._conn = conn
        self._driver = driver

    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        async with self._driver.answers():
            return await self._conn.fetch(_sql(sql), *args)

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._driver.answers():
            await self._conn.executemany(_sql(sql), rows)

    async def script(self, sql: str) -> None:
        async with self._driver.answers():
            await self._conn.execute(sql, timeout=SCRIPT_TIMEOUT)


class PostgresDriver(Statements):
    dialect = "postgres"

    def __init__(self, url: str, pool: asyncpg.Pool, timeout: float) -> None:
        self.url = url
        self._pool = pool
        self._timeout = timeout

    @asynccontextmanager
    async def answers(self) -> AsyncIterator[None]:
        """Turn a driver's failure into the store's own errors, in words."""
        try:
            yield
        except StoreError:
            raise
        except asyncpg.UniqueViolationError as e:
            raise Duplicate(str(e)) from e
        except asyncpg.ForeignKeyViolationError as e:
            raise MissingParent(str(e)) from e
        except Exception as e:
            unavailable = unavailable_reason(e)
            if unavailable is None:
                if isinstance(e, asyncpg.PostgresError):
                    raise StoreError(f"the store at {redact_url(self.url)} refused a statement: {e}") from e
                raise
            # The server that failed may be a primary demoted since: every
            # pooled connection is replaced as it is next used, through the
            # host list, so the next statements go to whichever host takes
            # writes now. Connections in use are closed when given back.
            await self._pool.expire_connections()
            raise StoreUnavailable(unavailable_sentence(self.url, unavailable)) from e

    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        async with self.answers():
            return await self._pool.fetch(_sql(sql), *args)

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self.answers():
            await self._pool.executemany(_sql(sql), rows)

    async def script(self, sql: str) -> None:
        async with self.answers():
            await self._pool.execute(sql, timeout=SCRIPT_TIMEOUT)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Statements]:
        async with self.answers():
            async with self._pool.acquire() as conn:
                async with conn.transaction():
                    yield _Tx(conn, self)

    async def lock_schema(self, tx: Statements) -> None:
        await tx.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)

    async def table_exists(self, name: str) -> bool:
        return bool(await self.fetchval("SELECT to_regclass($1) IS NOT NULL", name))

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self._pool.close(), self._timeout)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            # A server that went away cannot be told goodbye; drop the sockets.
            self._pool.terminate()


def unavailable_sentence(url: str, reason: str) -> str:
    """The store's failure as a sentence naming every host tried."""
    hosts = postgres_hosts(url)
    if len(hosts) < 2:
        return f"the store at {redact_url(url)} {reason}; is PostgreSQL running there?"
    tried = ", ".join(hosts[:-1]) + " and " + hosts[-1]
    return (f"the store at {redact_url(url)} {reason} (tried {tried}); is PostgreSQL running on them, "
            "with one of them the primary? Under Patroni, a failover takes up to its ttl")


def unavailable_reason(e: BaseException) -> str | None:
    """How `e` says the server is not answering, as words; None if it does not."""
    if isinstance(e, asyncpg.TargetServerAttributeNotMatched):
        # Checked before InternalClientError below, which it is a kind of.
        return "has no host that takes writes: those that answered are standbys"
    if isinstance(e, asyncpg.ReadOnlySQLTransactionError):
        # A connection made to the primary before it was demoted and restarted
        # read-only, or a standby reached without target_session_attrs.
        return "is read-only where llmgw reached it: that host is a standby now"
    if isinstance(e, asyncio.TimeoutError):
        return "did not answer in time"
    if isinstance(e, ConnectionRefusedError):
        return "refused the connection"
    if isinstance(e, (asyncpg.PostgresConnectionError, ConnectionError, EOFError)):
        return "closed the connection"
    if isinstance(e, OSError):
        return f"could not be reached ({e.strerror or e})"
    if isinstance(e, asyncpg.CannotConnectNowError):
        return "is starting up or shutting down"
    if isinstance(e, asyncpg.OperatorInterventionError):
        return "closed the connection (the server is shutting down)"
    if isinstance(e, asyncpg.TooManyConnectionsError):
        return "has no connections to spare"
    if isinstance(e, asyncpg.InterfaceError) and "closed" in str(e):
        return "closed the connection"
    if isinstance(e, asyncpg.InternalClientError) and "another operation" in str(e):
        # Seen when the server shut down while a pooled connection sat idle:
        # asyncpg's protocol is left mid-message and the next statement on it
        # fails with this rather than with a closed connection.
        return "closed the connection"
    return None


async def open_postgres(url: str, migrate: bool = True, timeout: float = 3.0) -> Store:
    """Connect to the PostgreSQL store at `url` and bring its schema up to date."""
    shown = redact_url(url)
    # asyncpg's timeout bounds one connection, whichever of the hosts it is
    # made to: a first host that is down without refusing (a machine gone,
    # its packets dropped) must leave time to try the next one.
    timeout *= max(1, len(postgres_hosts(url)))
    try:
        pool = await asyncio.wait_for(
            asyncpg.create_pool(
                url, min_size=1, max_size=10, timeout=timeout, command_timeout=COMMAND_TIMEOUT
            ),
            # asyncpg bounds each connection attempt by `timeout`; this bounds
            # the whole, for an address that resolves slowly or not at all.
            timeout * 2,
        )
    except TimeoutError as e:
        raise StoreUnavailable(unavailable_sentence(url, f"did not answer in {timeout:g} s")) from e
    except asyncpg.InvalidAuthorizationSpecificationError as e:
        raise StoreError(
            f"the store at {shown} refused llmgw's sign-in ({e}); check the user and password in its address"
        ) from e
    except asyncpg.InvalidCatalogNameError as e:
        raise StoreError(
            f"the store at {shown} has no such database ({e}); create it with createdb first"
        ) from e
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError) as e:
        # InternalClientError: TargetServerAttributeNotMatched, every host a standby.
        reason = unavailable_reason(e)
        if reason is None:
            raise StoreError(f"the store at {shown} could not be opened: {e}") from e
        raise StoreUnavailable(unavailable_sentence(url, reason)) from e
    driver = PostgresDriver(url, pool, timeout)
    try:
        await bring_up_to_date(driver, apply=migrate)
    except BaseException:
        await driver.close()
        raise
    return SQLStore(driver)
