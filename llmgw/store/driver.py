"""The seam between the store's SQL and a database: what a driver must do.

The Store's methods are written once, in `sql.py`, as SQL with `$1, $2`
placeholders and a `{now}` marker for the database's clock. A driver runs
that SQL on its database: `sqlite.py` (apsw, on a thread of its own) and
`postgres.py` (asyncpg, a pool). Everything a dialect does differently — the
placeholder spelling, the clock, locks, how errors look — stays in its driver.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, overload

from llmgw.store.errors import StoreError


class Row(Protocol):
    """A row as a driver gives it: columns by position, or all in order.

    Not Sequence: asyncpg's Record offers these but is no Sequence (it maps
    names too); apsw's rows are tuples.
    """

    @overload
    def __getitem__(self, index: int, /) -> Any: ...
    @overload
    def __getitem__(self, index: slice, /) -> Sequence[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __len__(self) -> int: ...


class Duplicate(StoreError):
    """A write broke a UNIQUE rule. Internal: SQLStore turns it into a Conflict
    that says which rule, since only it knows what the row means."""


class MissingParent(StoreError):
    """A write named a parent row that does not exist (a foreign key).
    Internal, like Duplicate."""


class Statements(abc.ABC):
    """Running SQL: a driver outside a transaction, or one transaction.

    Subclasses provide `_fetch` (every statement, rows or none) and `_many`;
    the rest follows from them so each driver writes two methods, not five.
    """

    @abc.abstractmethod
    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Row]:
        """Run one statement; its rows, or [] for one that returns none."""

    @abc.abstractmethod
    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of arguments."""

    @abc.abstractmethod
    async def script(self, sql: str) -> None:
        """Several statements without parameters (a migration file)."""

    async def fetch(self, sql: str, *args: Any) -> Sequence[Row]:
        return await self._fetch(sql, args)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self._fetch(sql, args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> None:
        await self._fetch(sql, args)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            await self._many(sql, rows)


class Driver(Protocol):
    """One database, as SQLStore sees it."""

    url: str
    dialect: str  # the folder of its migrations: "sqlite" or "postgres"

    async def fetch(self, sql: str, *args: Any) -> Sequence[Row]: ...
    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...
    async def fetchval(self, sql: str, *args: Any) -> Any: ...
    async def execute(self, sql: str, *args: Any) -> None: ...
    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self) -> AbstractAsyncContextManager[Statements]:
        """Statements inside one transaction: committed when the block ends,
        rolled back when it raises."""
        ...

    async def lock_schema(self, tx: Statements) -> None:
        """Hold, until `tx` ends, the lock that keeps two processes from
        migrating one store at the same moment."""
        ...

    async def table_exists(self, name: str) -> bool: ...
    async def close(self) -> None: ...
