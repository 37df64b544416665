"""Every Store method, written once in SQL both SQLite and PostgreSQL run.

Placeholders are `$1, $2` (the SQLite driver spells them `?1, ?2`) and
`{now}` is the database's own clock, so that two control planes on one
PostgreSQL agree on when a lease runs out whatever their own clocks say.
Upserts use `INSERT … ON CONFLICT`, which both dialects share.

SQLStore is made of one mixin per domain, each the SQL of one idea:
sql_account.py (people, sessions, the tenancy tree, API keys), sql_usage.py
(limits, the answer cache's setting, usage rows), sql_cluster.py (audit,
leases, settings, trust), sql_catalog.py (models, nodes, replicas),
sql_scim.py (SCIM provisioning's users and groups), sql_batch.py (files and
batches), sql_jobs.py (workflow jobs), sql_notify.py (the notification
webhooks and their deliveries) and sql_mcp.py (the company's MCP servers).
"""

from __future__ import annotations

from llmgw.store import redact_url
from llmgw.store.driver import Driver
from llmgw.store.migrate import current_version
from llmgw.store.sql_account import AccountSQL
from llmgw.store.sql_batch import BatchSQL
from llmgw.store.sql_catalog import CatalogSQL
from llmgw.store.sql_cluster import ClusterSQL
from llmgw.store.sql_jobs import JobSQL
from llmgw.store.sql_kb import KbSQL
from llmgw.store.sql_mcp import McpSQL
from llmgw.store.sql_notify import NotifySQL
from llmgw.store.sql_scim import ScimSQL
from llmgw.store.sql_usage import UsageSQL


class SQLStore(AccountSQL, ScimSQL, UsageSQL, ClusterSQL, CatalogSQL, BatchSQL, JobSQL, KbSQL, NotifySQL,
               McpSQL):
    """The Store protocol over a Driver. See llmgw.store.Store for each method."""

    def __init__(self, db: Driver) -> None:
        self._db = db
        self.url = db.url

    async def close(self) -> None:
        await self._db.close()

    async def ping(self) -> None:
        await self._db.fetchval("SELECT 1")

    async def schema_version(self) -> int:
        return await current_version(self._db)

    def __repr__(self) -> str:
        return f"<store {redact_url(self.url)}>"
