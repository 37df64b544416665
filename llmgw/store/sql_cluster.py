"""The cluster's part of the Store, in SQL both dialects run: audit, leases, settings, trust.

A mixin of SQLStore (sql.py), one domain per module as sql_catalog.py is.
"""

from __future__ import annotations

from typing import Any

from llmgw.store.driver import Driver, Duplicate, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import (
    AuditEntry,
    ClusterCA,
    ControlPlaneAddress,
    JoinToken,
    Lease,
    NodeCertificate,
    Settings,
    UpgradeRecord,
)
from llmgw.store.sql_json import dump_json, load_json

_AUDIT = "at, actor, via, action, target, before_json, after_json, id"
_LEASE = "name, holder, address, expires_at, epoch"
_SETTINGS = "version, doc, updated_at, updated_by"
_JOIN = "id, digest, name, created_at, expires_at, created_by, used_at, node_id"
_NODE_CERT = "serial, node_id, name, fingerprint, issued_at, expires_at"
# How long a token that ran out is kept, so that using it says "ran out"
# rather than "unknown" for a while; the audit log keeps it for good.
_JOIN_KEPT = 7 * 86400.0

# One statement, so two control planes trying at the same moment cannot both
# win: the row is inserted if missing, renewed if the caller holds it, taken
# (a new epoch) if it has run out, and otherwise left as it is. A lease that
# runs out at this very instant counts as run out, so a released lease (set
# to expire "now") can be taken by the next statement however fine the clock.
_TRY_LEASE = f"""
INSERT INTO leases (name, holder, address, expires_at, epoch)
VALUES ($1, $2, $3, {{now}} + $4, 1)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    address = excluded.address,
    expires_at = excluded.expires_at,
    epoch = CASE WHEN leases.holder = excluded.holder THEN leases.epoch ELSE leases.epoch + 1 END
WHERE leases.holder = excluded.holder OR leases.expires_at <= {{now}}
RETURNING {_LEASE}
"""



def _audit(r: Row) -> AuditEntry:
    return AuditEntry(r[0], r[1], r[2], r[3], r[4], load_json(r[5]), load_json(r[6]), r[7])


def _lease(r: Row) -> Lease:
    return Lease(r[0], r[1], r[2], r[3], r[4])


def _settings(r: Row) -> Settings:
    return Settings(r[0], load_json(r[1]), r[2], r[3])


def _join(r: Row) -> JoinToken:
    return JoinToken(r[0], bytes(r[1]), r[2], r[3], r[4], r[5], r[6], r[7])


class ClusterSQL:
    """Store methods for the audit log, leases, the cluster's settings and its trust; see llmgw.store.Store for each."""

    _db: Driver

    # audit

    async def add_audit(self, entry: AuditEntry) -> None:
        await self._db.execute(
            "INSERT INTO audit (at, actor, via, action, target, before_json, after_json) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            entry.at, entry.actor, entry.via, entry.action, entry.target,
            dump_json(entry.before), dump_json(entry.after),
        )

    async def list_audit(self, limit: int = 100, since: float | None = None,
                         target: str | None = None, *, actor: str | None = None, action: str | None = None,
                         offset: int = 0) -> list[AuditEntry]:
        where, args = [], []
        for column, value in (("at >=", since), ("target =", target), ("actor =", actor), ("action =", action)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        args += [int(limit), int(offset)]
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(
            f"SELECT {_AUDIT} FROM audit {clause}ORDER BY at DESC, id DESC LIMIT ${len(args) - 1} OFFSET ${len(args)}",
            *args,
        )
        return [_audit(r) for r in rows]

    # leadership

    async def try_lease(self, name: str, holder: str, address: str, ttl: float) -> Lease:
        row = await self._db.fetchrow(_TRY_LEASE, name, holder, address, float(ttl))
        if row is None:
            # Someone else holds it and it has not run out: say who.
            row = await self._db.fetchrow(f"SELECT {_LEASE} FROM leases WHERE name = $1", name)
        if row is None:
            # Only a row deleted by hand between our two statements gets here.
            raise StoreError(f"the lease {name} vanished while it was being taken; try again")
        return _lease(row)

    async def get_lease(self, name: str) -> Lease | None:
        row = await self._db.fetchrow(f"SELECT {_LEASE} FROM leases WHERE name = $1", name)
        return None if row is None else _lease(row)

    async def release_lease(self, name: str, holder: str) -> None:
        await self._db.execute(
            "UPDATE leases SET expires_at = {now} "
            "WHERE name = $1 AND holder = $2 AND expires_at > {now}",
            name, holder,
        )

    # the cluster's settings

    async def get_settings(self) -> Settings | None:
        row = await self._db.fetchrow(f"SELECT {_SETTINGS} FROM settings WHERE id = 1")
        return None if row is None else _settings(row)

    async def settings_version(self) -> int:
        version = await self._db.fetchval("SELECT version FROM settings WHERE id = 1")
        return 0 if version is None else int(version)

    async def put_settings(self, doc: dict[str, Any], expected_version: int, by: str) -> Settings:
        # Compare-and-set in one statement: the write lands only on the
        # version the caller read, so of two administrators saving at once
        # the second is told to look again rather than silently overwriting.
        text = dump_json(doc)
        if expected_version == 0:
            row = await self._db.fetchrow(
                "INSERT INTO settings (id, version, doc, updated_at, updated_by) "
                f"VALUES (1, 1, $1, {{now}}, $2) ON CONFLICT (id) DO NOTHING RETURNING {_SETTINGS}",
                text, by,
            )
        else:
            row = await self._db.fetchrow(
                "UPDATE settings SET version = version + 1, doc = $1, updated_at = {now}, "
                f"updated_by = $2 WHERE id = 1 AND version = $3 RETURNING {_SETTINGS}",
                text, by, int(expected_version),
            )
        if row is None:
            now = await self.settings_version()
            raise Conflict(
                f"the cluster's settings were changed by someone else (now version {now}); "
                "read them again"
            )
        return _settings(row)

    # the cluster's trust

    async def get_cluster_ca(self) -> ClusterCA | None:
        row = await self._db.fetchrow("SELECT cert_pem, key_sealed, created_at FROM cluster_ca WHERE id = 1")
        return None if row is None else ClusterCA(row[0], bytes(row[1]), row[2])

    async def put_cluster_ca(self, ca: ClusterCA) -> ClusterCA:
        # DO NOTHING then read back: of two control planes starting at once on
        # a fresh store, both end with the one CA that landed first.
        await self._db.execute(
            "INSERT INTO cluster_ca (id, cert_pem, key_sealed, created_at) VALUES (1, $1, $2, $3) "
            "ON CONFLICT (id) DO NOTHING",
            ca.cert_pem, bytes(ca.key_sealed), ca.created_at,
        )
        kept = await self.get_cluster_ca()
        if kept is None:
            raise StoreError("the cluster CA vanished while it was being kept; try again")
        return kept

    async def add_join_token(self, token: JoinToken) -> None:
        async with self._db.transaction() as tx:
            await tx.execute("DELETE FROM join_tokens WHERE expires_at < $1", token.created_at - _JOIN_KEPT)
            try:
                await tx.execute(
                    f"INSERT INTO join_tokens ({_JOIN}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    token.id, bytes(token.digest), token.name, token.created_at, token.expires_at,
                    token.created_by, token.used_at, token.node_id,
                )
            except Duplicate:
                raise Conflict("another join token already has that secret or id; make a new one") from None

    async def join_token(self, digest: bytes) -> JoinToken | None:
        row = await self._db.fetchrow(f"SELECT {_JOIN} FROM join_tokens WHERE digest = $1", bytes(digest))
        return None if row is None else _join(row)

    async def use_join_token(self, digest: bytes, node_id: str, at: float) -> JoinToken | None:
        # One statement: of two nodes presenting the same code at once, one
        # row is updated and the other finds used_at already set.
        row = await self._db.fetchrow(
            f"UPDATE join_tokens SET used_at = $3, node_id = $2 "
            f"WHERE digest = $1 AND used_at IS NULL AND expires_at > $3 RETURNING {_JOIN}",
            bytes(digest), node_id, at,
        )
        return None if row is None else _join(row)

    async def add_node_certificate(self, cert: NodeCertificate) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO node_certificates ({_NODE_CERT}) VALUES ($1, $2, $3, $4, $5, $6)",
                cert.serial, cert.node_id, cert.name, cert.fingerprint, cert.issued_at, cert.expires_at,
            )
        except Duplicate:
            raise Conflict(f"a certificate with the serial {cert.serial} is already recorded") from None

    async def list_node_certificates(self, node_id: str | None = None) -> list[NodeCertificate]:
        if node_id is None:
            rows = await self._db.fetch(f"SELECT {_NODE_CERT} FROM node_certificates ORDER BY issued_at, serial")
        else:
            rows = await self._db.fetch(
                f"SELECT {_NODE_CERT} FROM node_certificates WHERE node_id = $1 ORDER BY issued_at, serial",
                node_id,
            )
        return [NodeCertificate(*r) for r in rows]

    async def put_control_plane(self, cp: ControlPlaneAddress) -> None:
        await self._db.execute(
            "INSERT INTO control_planes (name, agent_address, updated_at, version) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (name) DO UPDATE SET agent_address = excluded.agent_address, "
            "updated_at = excluded.updated_at, version = excluded.version",
            cp.name, cp.agent_address, cp.updated_at, cp.version,
        )

    async def list_control_planes(self) -> list[ControlPlaneAddress]:
        rows = await self._db.fetch(
            "SELECT name, agent_address, updated_at, version FROM control_planes ORDER BY updated_at DESC, name")
        return [ControlPlaneAddress(*r) for r in rows]

    # the cluster's upgrade

    async def get_upgrade(self) -> UpgradeRecord | None:
        row = await self._db.fetchrow("SELECT revision, doc, updated_at FROM upgrades WHERE id = 1")
        return None if row is None else UpgradeRecord(row[0], load_json(row[1]), row[2])

    async def put_upgrade(self, doc: dict[str, Any], expected_revision: int, at: float) -> UpgradeRecord:
        # Compare-and-set in one statement: of two control planes driving the same upgrade, one write wins
        # and the other is told, rather than both moving machines.
        text = dump_json(doc)
        if expected_revision == 0:
            try:
                await self._db.execute("INSERT INTO upgrades (id, revision, doc, updated_at) VALUES (1, 1, $1, $2)",
                                       text, at)
            except Duplicate:
                raise Conflict("another upgrade was recorded meanwhile; read it again") from None
            return UpgradeRecord(1, doc, at)
        row = await self._db.fetchrow(
            "UPDATE upgrades SET revision = revision + 1, doc = $1, updated_at = $2 "
            "WHERE id = 1 AND revision = $3 RETURNING revision", text, at, expected_revision)
        if row is None:
            raise Conflict("the upgrade's record was changed by another control plane meanwhile; read it again")
        return UpgradeRecord(row[0], doc, at)
