"""Bringing a store's schema up to this program's: numbered SQL files, once each.

Each dialect has its own folder, `migrations/sqlite/` and
`migrations/postgres/`, of files named `NNNN_what.sql`. They are read with
importlib.resources because llmgw ships as a zipapp, where there is no
directory to list. `schema_migrations` records every file applied; a file is
applied in a transaction of its own with its record, so a store is never left
half-way through one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from llmgw.store import redact_url
from llmgw.store.driver import Driver
from llmgw.store.errors import SchemaTooNew

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# The one table every version has. Written to run on both dialects (SQLite
# takes DOUBLE PRECISION as REAL).
_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def known_migrations(dialect: str) -> tuple[Migration, ...]:
    """This program's migrations for `dialect`, in order."""
    folder = resources.files("llmgw.store").joinpath("migrations").joinpath(dialect)
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if not match:
            continue
        version = int(match.group(1))
        if version in found:
            # Two files with one number would apply in an order that depends
            # on the file system; refuse the build instead.
            raise RuntimeError(
                f"migrations/{dialect} has two files numbered {version:04d}: "
                f"{found[version].name} and {match.group(2)}"
            )
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    if not found:
        raise RuntimeError(f"llmgw was built without its migrations/{dialect} files")
    return tuple(found[v] for v in sorted(found))


def latest_version(dialect: str) -> int:
    return known_migrations(dialect)[-1].version


async def current_version(db: Driver) -> int:
    """The newest migration the store records; 0 for a store never migrated."""
    if not await db.table_exists("schema_migrations"):
        return 0
    return int(await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))


def _too_new(db: Driver, recorded: int, latest: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"the store at {redact_url(db.url)} was migrated by a newer llmgw "
        f"(schema {recorded}; this llmgw knows up to {latest}); "
        "run the newer llmgw or restore a backup"
    )


async def bring_up_to_date(db: Driver, *, apply: bool = True) -> int:
    """Apply the migrations the store lacks, in order; return its version after.

    With `apply=False` nothing is changed, but a store newer than this
    program is still refused: an older llmgw reading a newer schema would
    misread it or write rows the newer one does not expect.
    """
    migrations = known_migrations(db.dialect)
    latest = migrations[-1].version
    if not apply:
        recorded = await current_version(db)
        if recorded > latest:
            raise _too_new(db, recorded, latest)
        return recorded
    while True:
        # One transaction a file. The lock is taken first and the version
        # read under it, so of two control planes starting on one fresh
        # PostgreSQL the second waits and then finds the work done.
        async with db.transaction() as tx:
            await db.lock_schema(tx)
            await tx.execute(_MIGRATIONS_TABLE)
            recorded = int(await tx.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))
            if recorded > latest:
                raise _too_new(db, recorded, latest)
            pending = [m for m in migrations if m.version > recorded]
            if not pending:
                return recorded
            step = pending[0]
            await tx.script(step.sql)
            await tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, {now})",
                step.version,
                step.name,
            )
