"""The catalog's part of the Store, in SQL both dialects run: models, nodes, replicas.

A mixin of SQLStore (sql.py), one domain per module. Specs, Register and
Heartbeat documents are JSON text: the catalog validates them in llmgw (llmgw.control.catalog), and a new key in
a model file or the agent protocol needs no migration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmgw.store.driver import Driver, Duplicate, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import DESIRED, CatalogModel, NodeRecord, Replica
from llmgw.store.sql_json import dump_json, load_json

_MODEL = "name, spec, version, stopped, restarts, created_at, updated_at, updated_by, removed_at, purge"
_NODE = "id, name, labels, register, heartbeat, heartbeat_at, state, first_seen, updated_at"
_REPLICA = (
    "id, model, node_id, profile, state, desired, url, since, message, created_at, profile_hash, "
    "cpu_cores, memory_mb, gpus, gpu_memory_mb, replaces, detail"
)


def _model(r: Row) -> CatalogModel:
    return CatalogModel(r[0], load_json(r[1]), int(r[2]), bool(r[3]), int(r[4]), float(r[5]), float(r[6]), r[7],
                        None if r[8] is None else float(r[8]), bool(r[9]))


def _node(r: Row) -> NodeRecord:
    return NodeRecord(r[0], r[1], load_json(r[3]), load_json(r[2]) or {}, load_json(r[4]),
                      None if r[5] is None else float(r[5]), r[6], float(r[7]), float(r[8]))


def _replica(r: Row) -> Replica:
    return Replica(id=r[0], model=r[1], node_id=r[2], profile=int(r[3]), state=r[4], desired=r[5], url=r[6],
                   since=float(r[7]), message=r[8], created_at=float(r[9]), profile_hash=r[10],
                   cpu_cores=int(r[11]), memory_mb=int(r[12]), gpus=load_json(r[13]) or [],
                   gpu_memory_mb=int(r[14]), replaces=r[15], detail=load_json(r[16]) or {})


def _replica_args(x: Replica) -> tuple[Any, ...]:
    if x.desired not in DESIRED:
        raise StoreError(f'a replica\'s desired state is "run" or "stop", not "{x.desired}"')
    return (x.id, x.model, x.node_id, int(x.profile), x.state, x.desired, x.url, float(x.since), x.message,
            float(x.created_at), x.profile_hash, int(x.cpu_cores), int(x.memory_mb), dump_json(list(x.gpus)),
            int(x.gpu_memory_mb), x.replaces, dump_json(x.detail or {}))


_PUT_REPLICA = (
    f"INSERT INTO replicas ({_REPLICA}) VALUES "
    "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) "
    "ON CONFLICT (id) DO UPDATE SET model = excluded.model, node_id = excluded.node_id, "
    "profile = excluded.profile, state = excluded.state, desired = excluded.desired, url = excluded.url, "
    "since = excluded.since, message = excluded.message, created_at = excluded.created_at, "
    "profile_hash = excluded.profile_hash, cpu_cores = excluded.cpu_cores, memory_mb = excluded.memory_mb, "
    "gpus = excluded.gpus, gpu_memory_mb = excluded.gpu_memory_mb, replaces = excluded.replaces, "
    "detail = excluded.detail"
)


class CatalogSQL:
    """Store methods for the catalog; see llmgw.store.Store for each."""

    _db: Driver

    # models

    async def add_model(self, model: CatalogModel) -> CatalogModel:
        try:
            row = await self._db.fetchrow(
                f"INSERT INTO models ({_MODEL}) VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8, $9) RETURNING {_MODEL}",
                model.name, dump_json(model.spec), bool(model.stopped), int(model.restarts), float(model.created_at),
                float(model.updated_at or model.created_at), model.updated_by,
                None if model.removed_at is None else float(model.removed_at), bool(model.purge),
            )
        except Duplicate:
            raise Conflict(f"the catalog already has a model named {model.name}") from None
        assert row is not None, "an INSERT ... RETURNING that did not raise returns its row"
        return _model(row)

    async def get_model(self, name: str) -> CatalogModel | None:
        row = await self._db.fetchrow(f"SELECT {_MODEL} FROM models WHERE name = $1", name)
        return None if row is None else _model(row)

    async def list_models(self, include_removed: bool = False) -> list[CatalogModel]:
        where = "" if include_removed else "WHERE removed_at IS NULL "
        rows = await self._db.fetch(f"SELECT {_MODEL} FROM models {where}ORDER BY name")
        return [_model(r) for r in rows]

    async def put_model(self, model: CatalogModel, expected_version: int) -> CatalogModel:
        # Compare-and-set in one statement, as settings are: of two changes
        # made from one reading, the second is told to read again.
        row = await self._db.fetchrow(
            "UPDATE models SET spec = $2, version = version + 1, stopped = $3, restarts = $4, updated_at = $5, "
            f"updated_by = $6, removed_at = $7, purge = $8 WHERE name = $1 AND version = $9 RETURNING {_MODEL}",
            model.name, dump_json(model.spec), bool(model.stopped), int(model.restarts), float(model.updated_at),
            model.updated_by, None if model.removed_at is None else float(model.removed_at), bool(model.purge),
            int(expected_version),
        )
        if row is None:
            now = await self._db.fetchval("SELECT version FROM models WHERE name = $1", model.name)
            if now is None:
                raise StoreError(f"there is no model named {model.name} in the catalog")
            raise Conflict(f"the model {model.name} was changed by someone else (now version {now}); "
                           "read it again")
        return _model(row)

    async def delete_model(self, name: str) -> None:
        await self._db.execute("DELETE FROM models WHERE name = $1", name)

    # nodes

    async def put_node(self, node: NodeRecord) -> None:
        await self._db.execute(
            f"INSERT INTO nodes ({_NODE}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "ON CONFLICT (id) DO UPDATE SET name = excluded.name, labels = excluded.labels, "
            "register = excluded.register, heartbeat = excluded.heartbeat, "
            "heartbeat_at = excluded.heartbeat_at, state = excluded.state, updated_at = excluded.updated_at",
            node.id, node.name, dump_json(node.labels or {}), dump_json(node.register), dump_json(node.heartbeat),
            None if node.heartbeat_at is None else float(node.heartbeat_at), node.state,
            float(node.first_seen), float(node.updated_at),
        )

    async def put_node_heartbeats(self, beats: Sequence[tuple[str, dict[str, Any], float]]) -> None:
        # One statement run for each, in one go: a thousand nodes beat every
        # few seconds, and a round trip each would keep the store busy.
        await self._db.executemany(
            "UPDATE nodes SET heartbeat = $2, heartbeat_at = $3 WHERE id = $1",
            [(node_id, dump_json(beat), float(at)) for node_id, beat, at in beats],
        )

    async def get_node(self, node_id: str) -> NodeRecord | None:
        row = await self._db.fetchrow(f"SELECT {_NODE} FROM nodes WHERE id = $1", node_id)
        return None if row is None else _node(row)

    async def list_nodes(self) -> list[NodeRecord]:
        rows = await self._db.fetch(f"SELECT {_NODE} FROM nodes ORDER BY name, id")
        return [_node(r) for r in rows]

    async def delete_node(self, node_id: str) -> None:
        await self._db.execute("DELETE FROM nodes WHERE id = $1", node_id)

    # replicas

    async def put_replicas(self, replicas: Sequence[Replica]) -> None:
        if not replicas:
            return
        rows = [_replica_args(x) for x in replicas]
        async with self._db.transaction() as tx:
            await tx.executemany(_PUT_REPLICA, rows)

    async def get_replica(self, replica_id: str) -> Replica | None:
        row = await self._db.fetchrow(f"SELECT {_REPLICA} FROM replicas WHERE id = $1", replica_id)
        return None if row is None else _replica(row)

    async def list_replicas(self, model: str | None = None, node_id: str | None = None) -> list[Replica]:
        where, args = [], []
        for column, value in (("model", model), ("node_id", node_id)):
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(f"SELECT {_REPLICA} FROM replicas {clause}ORDER BY model, created_at, id", *args)
        return [_replica(r) for r in rows]

    async def delete_replicas(self, replica_ids: Sequence[str]) -> None:
        await self._db.executemany("DELETE FROM replicas WHERE id = $1", [(i,) for i in replica_ids])
