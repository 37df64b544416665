"""Every Store method, written once in SQL both SQLite and PostgreSQL run.

Placeholders are `$1, $2` (the SQLite driver spells them `?1, ?2`) and
`{now}` is the database's own clock, so that two control planes on one
PostgreSQL agree on when a lease runs out whatever their own clocks say.
Upserts use `INSERT … ON CONFLICT`, which both dialects share.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Sequence

import orjson

from llmgw.store import redact_url
from llmgw.store.driver import Driver, Duplicate, MissingParent, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.migrate import current_version
from llmgw.store.sql_catalog import CatalogSQL
from llmgw.store.records import (
    SCOPES,
    ApiKey,
    AuditEntry,
    ClusterCA,
    ControlPlaneAddress,
    JoinToken,
    Lease,
    Limits,
    NodeCertificate,
    Org,
    Person,
    Project,
    ProjectCache,
    ProjectPath,
    Session,
    Settings,
    Team,
    Usage,
)

_PERSON = "id, email, name, role, password_hash, created_at, disabled"
_KEY = "id, name, project_id, digest, prefix, person_id, band, created_at, expires_at, revoked_at"
_LIMITS = "scope, scope_id, rpm, tpm, budget_micros, period, models, expires_at"
_USAGE = (
    "id, at, key_id, project_id, model, endpoint, status, prompt_tokens, cached_tokens, "
    "completion_tokens, cost_micros, ttft_ms, duration_ms, cache, detail, answer_id"
)
_AUDIT = "at, actor, via, action, target, before_json, after_json, id"
_CACHE = "project_id, ttl, similarity, enabled, updated_at"
_LEASE = "name, holder, address, expires_at, epoch"
_SETTINGS = "version, doc, updated_at, updated_by"
_JOIN = "id, digest, name, created_at, expires_at, created_by, used_at, node_id"
_NODE_CERT = "serial, node_id, name, fingerprint, issued_at, expires_at"
# How long a token that ran out is kept, so that using it says "ran out"
# rather than "unknown" for a while; the audit log keeps it for good.
_JOIN_KEPT = 7 * 86400.0
_PATH = (
    "o.id, o.name, o.created_at, t.id, t.org_id, t.name, t.created_at, "
    "p.id, p.team_id, p.name, p.created_at"
)
_PATH_FROM = "projects p JOIN teams t ON t.id = p.team_id JOIN orgs o ON o.id = t.org_id"

# Spend at each level of the tree. A team's and an org's are found through
# the projects under them rather than kept on the usage row, so moving a
# project is one update and every sum follows it.
_SPEND = {
    "key": "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage "
           "WHERE key_id = $1 AND at >= $2",
    "project": "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage "
               "WHERE project_id = $1 AND at >= $2",
    "team": "SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage u "
            "JOIN projects p ON p.id = u.project_id WHERE p.team_id = $1 AND u.at >= $2",
    "org": "SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage u "
           "JOIN projects p ON p.id = u.project_id JOIN teams t ON t.id = p.team_id "
           "WHERE t.org_id = $1 AND u.at >= $2",
}

# What usage_summary groups by: the column on the usage row.
_SUMMARY_BY = {"key": "key_id", "project": "project_id", "model": "model"}

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


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _unjson(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _email_key(email: str) -> str:
    return email.strip().casefold()


def _person(r: Row) -> Person:
    return Person(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))


def _key(r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6], r[7], r[8], r[9])


def _limits(r: Row) -> Limits:
    return Limits(r[0], r[1], r[2], r[3], r[4], r[5], _unjson(r[6]), r[7])


def _usage(r: Row) -> Usage:
    return Usage(*r[:14], detail=_unjson(r[14]) or {}, answer_id=r[15])


def _audit(r: Row) -> AuditEntry:
    return AuditEntry(r[0], r[1], r[2], r[3], r[4], _unjson(r[5]), _unjson(r[6]), r[7])


def _cache(r: Row) -> ProjectCache:
    return ProjectCache(r[0], float(r[1]), None if r[2] is None else float(r[2]), bool(r[3]), float(r[4]))


def _lease(r: Row) -> Lease:
    return Lease(r[0], r[1], r[2], r[3], r[4])


def _settings(r: Row) -> Settings:
    return Settings(r[0], _unjson(r[1]), r[2], r[3])


def _join(r: Row) -> JoinToken:
    return JoinToken(r[0], bytes(r[1]), r[2], r[3], r[4], r[5], r[6], r[7])


def _path(r: Row) -> ProjectPath:
    return ProjectPath(Org(*r[0:3]), Team(*r[3:7]), Project(*r[7:11]))


def _new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"


class SQLStore(CatalogSQL):
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

    # people and sessions

    async def add_person(self, person: Person) -> Person:
        try:
            await self._db.execute(
                "INSERT INTO people (id, email, email_key, name, role, password_hash, created_at, disabled) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                person.id, person.email, _email_key(person.email), person.name, person.role,
                person.password_hash, person.created_at, bool(person.disabled),
            )
        except Duplicate:
            if await self.person_by_email(person.email) is not None:
                raise Conflict(
                    f"{person.email} already belongs to someone here; "
                    "use another email, or find that person with their email"
                ) from None
            raise Conflict(f"a person with the id {person.id} already exists") from None
        return person

    async def person_by_id(self, person_id: str) -> Person | None:
        row = await self._db.fetchrow(f"SELECT {_PERSON} FROM people WHERE id = $1", person_id)
        return None if row is None else _person(row)

    async def person_by_email(self, email: str) -> Person | None:
        row = await self._db.fetchrow(
            f"SELECT {_PERSON} FROM people WHERE email_key = $1", _email_key(email)
        )
        return None if row is None else _person(row)

    async def list_people(self) -> list[Person]:
        rows = await self._db.fetch(f"SELECT {_PERSON} FROM people ORDER BY email_key")
        return [_person(r) for r in rows]

    async def count_people(self) -> int:
        return int(await self._db.fetchval("SELECT COUNT(*) FROM people"))

    async def add_session(self, session: Session) -> None:
        try:
            await self._db.execute(
                "INSERT INTO sessions (id, person_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
                session.id, session.person_id, session.created_at, session.expires_at,
            )
        except MissingParent:
            raise StoreError(
                f"there is no person with the id {session.person_id} to sign in"
            ) from None
        except Duplicate:
            raise Conflict("that session already exists") from None

    async def session_by_id(self, session_id: str) -> Session | None:
        row = await self._db.fetchrow(
            "SELECT id, person_id, created_at, expires_at FROM sessions WHERE id = $1", session_id
        )
        return None if row is None else Session(*row)

    async def delete_session(self, session_id: str) -> None:
        await self._db.execute("DELETE FROM sessions WHERE id = $1", session_id)

    # the tenancy tree

    async def ensure_project(self, org: str, team: str, project: str) -> ProjectPath:
        found = await self.project_by_path(org, team, project)
        if found is not None:
            return found
        now = time.time()
        # Insert-if-missing then read back, at each level, in one transaction:
        # a caller racing this one either waits for our row (PostgreSQL) or
        # is serialized behind us (SQLite), and both end with the same ids.
        async with self._db.transaction() as tx:
            await tx.execute(
                "INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                _new_id("org"), org, now,
            )
            o = Org(*await tx.fetchrow("SELECT id, name, created_at FROM orgs WHERE name = $1", org))
            await tx.execute(
                "INSERT INTO teams (id, org_id, name, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (org_id, name) DO NOTHING",
                _new_id("team"), o.id, team, now,
            )
            t = Team(*await tx.fetchrow(
                "SELECT id, org_id, name, created_at FROM teams WHERE org_id = $1 AND name = $2",
                o.id, team,
            ))
            await tx.execute(
                "INSERT INTO projects (id, team_id, name, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (team_id, name) DO NOTHING",
                _new_id("prj"), t.id, project, now,
            )
            p = Project(*await tx.fetchrow(
                "SELECT id, team_id, name, created_at FROM projects WHERE team_id = $1 AND name = $2",
                t.id, project,
            ))
        return ProjectPath(o, t, p)

    async def project_by_path(self, org: str, team: str, project: str) -> ProjectPath | None:
        row = await self._db.fetchrow(
            f"SELECT {_PATH} FROM {_PATH_FROM} WHERE o.name = $1 AND t.name = $2 AND p.name = $3",
            org, team, project,
        )
        return None if row is None else _path(row)

    async def project_path(self, project_id: str) -> ProjectPath | None:
        row = await self._db.fetchrow(f"SELECT {_PATH} FROM {_PATH_FROM} WHERE p.id = $1", project_id)
        return None if row is None else _path(row)

    async def org_by_id(self, org_id: str) -> Org | None:
        row = await self._db.fetchrow("SELECT id, name, created_at FROM orgs WHERE id = $1", org_id)
        return None if row is None else Org(*row)

    async def team_by_id(self, team_id: str) -> Team | None:
        row = await self._db.fetchrow(
            "SELECT id, org_id, name, created_at FROM teams WHERE id = $1", team_id
        )
        return None if row is None else Team(*row)

    async def org_by_name(self, name: str) -> Org | None:
        row = await self._db.fetchrow("SELECT id, name, created_at FROM orgs WHERE name = $1", name)
        return None if row is None else Org(*row)

    async def team_by_name(self, org_id: str, name: str) -> Team | None:
        row = await self._db.fetchrow(
            "SELECT id, org_id, name, created_at FROM teams WHERE org_id = $1 AND name = $2",
            org_id, name,
        )
        return None if row is None else Team(*row)

    async def list_orgs(self) -> list[Org]:
        rows = await self._db.fetch("SELECT id, name, created_at FROM orgs ORDER BY name")
        return [Org(*r) for r in rows]

    async def list_teams(self, org_id: str | None = None) -> list[Team]:
        if org_id is None:
            rows = await self._db.fetch("SELECT id, org_id, name, created_at FROM teams ORDER BY name, id")
        else:
            rows = await self._db.fetch(
                "SELECT id, org_id, name, created_at FROM teams WHERE org_id = $1 ORDER BY name", org_id
            )
        return [Team(*r) for r in rows]

    async def list_projects(self, team_id: str | None = None) -> list[Project]:
        if team_id is None:
            rows = await self._db.fetch(
                "SELECT id, team_id, name, created_at FROM projects ORDER BY name, id"
            )
        else:
            rows = await self._db.fetch(
                "SELECT id, team_id, name, created_at FROM projects WHERE team_id = $1 ORDER BY name",
                team_id,
            )
        return [Project(*r) for r in rows]

    # API keys

    async def add_key(self, key: ApiKey) -> ApiKey:
        try:
            await self._db.execute(
                f"INSERT INTO api_keys ({_KEY}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                key.id, key.name, key.project_id, bytes(key.digest), key.prefix, key.person_id,
                key.band, key.created_at, key.expires_at, key.revoked_at,
            )
        except Duplicate:
            if await self.key_by_digest(key.digest) is not None:
                raise Conflict(
                    f"another API key already has the secret of {key.prefix}…; make a new secret"
                ) from None
            raise Conflict(f"an API key with the id {key.id} already exists") from None
        except MissingParent:
            if await self.project_path(key.project_id) is None:
                raise StoreError(
                    f"there is no project with the id {key.project_id} to hold the key {key.name}"
                ) from None
            raise StoreError(
                f"there is no person with the id {key.person_id} to own the key {key.name}"
            ) from None
        return key

    async def key_by_digest(self, digest: bytes) -> ApiKey | None:
        row = await self._db.fetchrow(f"SELECT {_KEY} FROM api_keys WHERE digest = $1", bytes(digest))
        return None if row is None else _key(row)

    async def key_by_id(self, key_id: str) -> ApiKey | None:
        row = await self._db.fetchrow(f"SELECT {_KEY} FROM api_keys WHERE id = $1", key_id)
        return None if row is None else _key(row)

    async def list_keys(self, project_id: str | None = None) -> list[ApiKey]:
        if project_id is None:
            rows = await self._db.fetch(f"SELECT {_KEY} FROM api_keys ORDER BY created_at, id")
        else:
            rows = await self._db.fetch(
                f"SELECT {_KEY} FROM api_keys WHERE project_id = $1 ORDER BY created_at, id", project_id
            )
        return [_key(r) for r in rows]

    async def revoke_key(self, key_id: str, at: float) -> ApiKey | None:
        # COALESCE keeps the first revocation's time: revoking twice (a retry,
        # two administrators) must not rewrite when the key stopped working.
        row = await self._db.fetchrow(
            f"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING {_KEY}",
            key_id, at,
        )
        return None if row is None else _key(row)

    # limits at each level

    async def get_limits(self, scope: str, scope_id: str) -> Limits | None:
        row = await self._db.fetchrow(
            f"SELECT {_LIMITS} FROM limits WHERE scope = $1 AND scope_id = $2", scope, scope_id
        )
        return None if row is None else _limits(row)

    async def put_limits(self, limits: Limits) -> None:
        await self._db.execute(
            f"INSERT INTO limits ({_LIMITS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
            "ON CONFLICT (scope, scope_id) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm, "
            "budget_micros = excluded.budget_micros, period = excluded.period, "
            "models = excluded.models, expires_at = excluded.expires_at",
            limits.scope, limits.scope_id, limits.rpm, limits.tpm, limits.budget_micros,
            limits.period, _json(limits.models), limits.expires_at,
        )

    async def list_budgets(self) -> list[Limits]:
        rows = await self._db.fetch(
            f"SELECT {_LIMITS} FROM limits WHERE budget_micros IS NOT NULL ORDER BY scope, scope_id"
        )
        return [_limits(r) for r in rows]

    # the answer cache's setting per project

    async def get_project_cache(self, project_id: str) -> ProjectCache | None:
        row = await self._db.fetchrow(f"SELECT {_CACHE} FROM project_cache WHERE project_id = $1", project_id)
        return None if row is None else _cache(row)

    async def put_project_cache(self, setting: ProjectCache) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO project_cache ({_CACHE}) VALUES ($1, $2, $3, $4, $5) "
                "ON CONFLICT (project_id) DO UPDATE SET ttl = excluded.ttl, similarity = excluded.similarity, "
                "enabled = excluded.enabled, updated_at = excluded.updated_at",
                setting.project_id, float(setting.ttl),
                None if setting.similar is None else float(setting.similar),
                bool(setting.enabled), float(setting.updated_at),
            )
        except MissingParent:
            raise StoreError(
                f"there is no project with the id {setting.project_id} to set the answer cache of"
            ) from None

    async def list_project_caches(self) -> list[ProjectCache]:
        rows = await self._db.fetch(f"SELECT {_CACHE} FROM project_cache ORDER BY project_id")
        return [_cache(r) for r in rows]

    # usage rows

    async def add_usage(self, rows: Sequence[Usage]) -> None:
        if not rows:
            return
        # DO NOTHING on a known id: the writer retries a batch whose commit it
        # did not see, and a request must be counted once however often.
        values = [
            (u.id, u.at, u.key_id, u.project_id, u.model, u.endpoint, u.status, u.prompt_tokens,
             u.cached_tokens, u.completion_tokens, u.cost_micros, u.ttft_ms, u.duration_ms,
             u.cache, _json(u.detail or {}), u.answer_id)
            for u in rows
        ]
        async with self._db.transaction() as tx:
            await tx.executemany(
                f"INSERT INTO usage ({_USAGE}) VALUES "
                "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) "
                "ON CONFLICT (id) DO NOTHING",
                values,
            )

    async def usage_rows(self, since: float, until: float | None = None,
                         key_id: str | None = None, project_id: str | None = None,
                         limit: int = 1000) -> list[Usage]:
        """Rows from `since` (inclusive) to `until` (exclusive), oldest first,
        so a reader can page on by passing the last row's time."""
        where, args = ["at >= $1"], [since]
        for column, value in (("at <", until), ("key_id =", key_id), ("project_id =", project_id)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage WHERE {' AND '.join(where)} ORDER BY at, id LIMIT ${len(args)}",
            *args,
        )
        return [_usage(r) for r in rows]

    async def spend_since(self, scope: str, scope_id: str, since: float) -> int:
        sql = _SPEND.get(scope)
        if sql is None:
            raise StoreError(f'"{scope}" is not a level of spend; use one of {", ".join(SCOPES)}')
        return int(await self._db.fetchval(sql, scope_id, since))

    async def usage_by_id(self, request_id: str) -> Usage | None:
        row = await self._db.fetchrow(f"SELECT {_USAGE} FROM usage WHERE id = $1", request_id)
        if row is None:
            # The answer's own id. A cached answer is replayed with the id it
            # was first given, so several rows can share one: the latest is
            # the one its holder most likely asks about.
            row = await self._db.fetchrow(
                f"SELECT {_USAGE} FROM usage WHERE answer_id = $1 ORDER BY at DESC, id DESC LIMIT 1",
                request_id)
        return None if row is None else _usage(row)

    async def recent_usage(self, limit: int = 50, since: float | None = None,
                           key_id: str | None = None, model: str | None = None,
                           status: int | None = None, errors: bool = False) -> list[Usage]:
        """The latest rows, newest first, that match every filter given.

        `errors` keeps rows with status 400 and up. Served by usage_at_id
        (and usage_key_at for a key): the newest rows are read first and the
        scan stops at `limit`.
        """
        where, args = [], []
        for column, value in (("at >=", since), ("key_id =", key_id), ("model =", model),
                              ("status =", status)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        if errors:
            where.append("status >= 400")
        args.append(int(limit))
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage {clause}ORDER BY at DESC, id DESC LIMIT ${len(args)}", *args)
        return [_usage(r) for r in rows]

    async def usage_summary(self, since: float, until: float | None = None,
                            by: str = "key") -> list[dict[str, Any]]:
        column = _SUMMARY_BY.get(by)
        if column is None:
            raise StoreError(f'usage cannot be summed by "{by}"; use one of {", ".join(_SUMMARY_BY)}')
        where, args = "at >= $1", [since]
        if until is not None:
            where += " AND at < $2"
            args.append(until)
        rows = await self._db.fetch(
            f"SELECT {column}, COUNT(*), "
            "CAST(COALESCE(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), 0) AS BIGINT), "
            "CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT), "
            "CAST(COALESCE(SUM(cached_tokens), 0) AS BIGINT), "
            "CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT), "
            "CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) "
            f"FROM usage WHERE {where} GROUP BY {column}",
            *args,
        )
        out = [
            {"group": r[0], "requests": int(r[1]), "errors": int(r[2]), "prompt_tokens": int(r[3]),
             "cached_tokens": int(r[4]), "completion_tokens": int(r[5]), "cost_micros": int(r[6])}
            for r in rows
        ]
        # Sorted here rather than in SQL: the two dialects order NULL and
        # text differently, and the same store must read the same either way.
        out.sort(key=lambda g: (-g["cost_micros"], -g["requests"], g["group"] is None, g["group"] or ""))
        return out

    async def usage_page(self, since: float, until: float | None = None,
                         after_at: float | None = None, after_id: str | None = None,
                         limit: int = 1000) -> list[Usage]:
        """Up to `limit` rows in [since, until), oldest first, after the row
        (after_at, after_id): the last of the previous page. Keyed on the
        row's place rather than an offset, so each page costs the same
        however deep the export is, and rows landing meanwhile do not shift it."""
        where, args = ["at >= $1"], [since]
        if until is not None:
            args.append(until)
            where.append(f"at < ${len(args)}")
        if after_at is not None:
            args.extend([after_at, after_id or ""])
            n = len(args)
            where.append(f"(at > ${n - 1} OR (at = ${n - 1} AND id > ${n}))")
        args.append(int(limit))
        rows = await self._db.fetch(
            f"SELECT {_USAGE} FROM usage WHERE {' AND '.join(where)} ORDER BY at, id LIMIT ${len(args)}",
            *args,
        )
        return [_usage(r) for r in rows]

    # audit

    async def add_audit(self, entry: AuditEntry) -> None:
        await self._db.execute(
            "INSERT INTO audit (at, actor, via, action, target, before_json, after_json) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            entry.at, entry.actor, entry.via, entry.action, entry.target,
            _json(entry.before), _json(entry.after),
        )

    async def list_audit(self, limit: int = 100, since: float | None = None,
                         target: str | None = None) -> list[AuditEntry]:
        where, args = [], []
        for column, value in (("at >=", since), ("target =", target)):
            if value is not None:
                args.append(value)
                where.append(f"{column} ${len(args)}")
        args.append(int(limit))
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(
            f"SELECT {_AUDIT} FROM audit {clause}ORDER BY at DESC, id DESC LIMIT ${len(args)}", *args
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

    async def put_settings(self, doc: dict, expected_version: int, by: str) -> Settings:
        # Compare-and-set in one statement: the write lands only on the
        # version the caller read, so of two administrators saving at once
        # the second is told to look again rather than silently overwriting.
        text = _json(doc)
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
            "INSERT INTO control_planes (name, agent_address, updated_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (name) DO UPDATE SET agent_address = excluded.agent_address, "
            "updated_at = excluded.updated_at",
            cp.name, cp.agent_address, cp.updated_at,
        )

    async def list_control_planes(self) -> list[ControlPlaneAddress]:
        rows = await self._db.fetch(
            "SELECT name, agent_address, updated_at FROM control_planes ORDER BY updated_at DESC, name")
        return [ControlPlaneAddress(*r) for r in rows]

    def __repr__(self) -> str:
        return f"<store {redact_url(self.url)}>"
