"""The MCP gateway's part of the Store, in SQL both dialects run: the company's MCP servers.

A mixin of SQLStore (sql.py). The secret headers arrive sealed (llmgw.mcp
seals them under the master key); this module keeps the bytes as they are.
"""

from __future__ import annotations

from llmgw.store.driver import Driver, Duplicate, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import McpServer
from llmgw.store.sql_json import dump_json, load_json

_SERVER = ("name, url, description, headers, header_refs, secret_names, sealed, timeout, rate, disabled, "
           "allow_private, version, created_at, updated_at, updated_by, run_as")


def _server(r: Row) -> McpServer:
    return McpServer(name=r[0], url=r[1], description=r[2], headers=load_json(r[3]) or {},
                     header_refs=load_json(r[4]) or {}, secret_names=load_json(r[5]) or [],
                     sealed=None if r[6] is None else bytes(r[6]), timeout=float(r[7]),
                     rate=None if r[8] is None else int(r[8]), disabled=bool(r[9]), allow_private=bool(r[10]),
                     version=int(r[11]), created_at=float(r[12]), updated_at=float(r[13]), updated_by=r[14],
                     run_as=r[15])


def _args(s: McpServer) -> tuple[object, ...]:
    return (s.url, s.description, dump_json(s.headers or {}), dump_json(s.header_refs or {}),
            dump_json(list(s.secret_names)), s.sealed, float(s.timeout), s.rate, bool(s.disabled),
            bool(s.allow_private), float(s.updated_at), s.updated_by, s.run_as)


class McpSQL:
    """Store methods for the MCP servers; see llmgw.store.Store for each."""

    _db: Driver

    async def add_mcp_server(self, server: McpServer) -> McpServer:
        try:
            row = await self._db.fetchrow(
                f"INSERT INTO mcp_servers ({_SERVER}) VALUES ($14, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, "
                f"$11, $11, $12, $13) RETURNING {_SERVER}", *_args(server), server.name)
        except Duplicate:
            raise Conflict(f"there is already an MCP server named {server.name}") from None
        assert row is not None, "an INSERT ... RETURNING that did not raise returns its row"
        return _server(row)

    async def put_mcp_server(self, server: McpServer, expected_version: int) -> McpServer:
        # Compare-and-set, as models are: of two changes made from one reading, the second reads again.
        row = await self._db.fetchrow(
            "UPDATE mcp_servers SET url = $1, description = $2, headers = $3, header_refs = $4, "
            "secret_names = $5, sealed = $6, timeout = $7, rate = $8, disabled = $9, allow_private = $10, "
            "updated_at = $11, updated_by = $12, run_as = $13, version = version + 1 "
            "WHERE name = $14 AND version = $15 "
            f"RETURNING {_SERVER}", *_args(server), server.name, int(expected_version))
        if row is None:
            now = await self._db.fetchval("SELECT version FROM mcp_servers WHERE name = $1", server.name)
            if now is None:
                raise StoreError(f"there is no MCP server named {server.name}")
            raise Conflict(f"the MCP server {server.name} was changed by someone else (now version {now}); "
                           "read it again")
        return _server(row)

    async def get_mcp_server(self, name: str) -> McpServer | None:
        row = await self._db.fetchrow(f"SELECT {_SERVER} FROM mcp_servers WHERE name = $1", name)
        return None if row is None else _server(row)

    async def list_mcp_servers(self) -> list[McpServer]:
        rows = await self._db.fetch(f"SELECT {_SERVER} FROM mcp_servers ORDER BY name")
        return [_server(r) for r in rows]

    async def delete_mcp_server(self, name: str) -> bool:
        gone = await self._db.fetchval("DELETE FROM mcp_servers WHERE name = $1 RETURNING name", name)
        return gone is not None
