"""The account's part of the Store, in SQL both dialects run: people, sessions, the tenancy tree, API keys.

A mixin of SQLStore (sql.py), one domain per module as sql_catalog.py is.
"""

from __future__ import annotations

import secrets
import time

from llmgw.store.driver import Driver, Duplicate, MissingParent, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import ApiKey, Org, Person, Project, ProjectPath, Session, Team

_PERSON = "id, email, name, role, password_hash, created_at, disabled"
_KEY = "id, name, project_id, digest, prefix, person_id, band, created_at, expires_at, revoked_at"
_PATH = (
    "o.id, o.name, o.created_at, t.id, t.org_id, t.name, t.created_at, "
    "p.id, p.team_id, p.name, p.created_at"
)
_PATH_FROM = "projects p JOIN teams t ON t.id = p.team_id JOIN orgs o ON o.id = t.org_id"


def _email_key(email: str) -> str:
    return email.strip().casefold()


def _person(r: Row) -> Person:
    return Person(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))


def _key(r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6], r[7], r[8], r[9])


def _path(r: Row) -> ProjectPath:
    return ProjectPath(Org(*r[0:3]), Team(*r[3:7]), Project(*r[7:11]))


def _ensured(row: Row | None) -> Row:
    """A row read back after its insert-if-missing, in the same transaction: always there."""
    assert row is not None, "a row inserted or found in this transaction is there to read"
    return row


def _new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"


class AccountSQL:
    """Store methods for people, sessions, the tenancy tree and API keys; see llmgw.store.Store for each."""

    _db: Driver

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
            o = Org(*_ensured(await tx.fetchrow("SELECT id, name, created_at FROM orgs WHERE name = $1", org)))
            await tx.execute(
                "INSERT INTO teams (id, org_id, name, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (org_id, name) DO NOTHING",
                _new_id("team"), o.id, team, now,
            )
            t = Team(*_ensured(await tx.fetchrow(
                "SELECT id, org_id, name, created_at FROM teams WHERE org_id = $1 AND name = $2",
                o.id, team,
            )))
            await tx.execute(
                "INSERT INTO projects (id, team_id, name, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (team_id, name) DO NOTHING",
                _new_id("prj"), t.id, project, now,
            )
            p = Project(*_ensured(await tx.fetchrow(
                "SELECT id, team_id, name, created_at FROM projects WHERE team_id = $1 AND name = $2",
                t.id, project,
            )))
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
