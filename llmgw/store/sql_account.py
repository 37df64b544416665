"""The account's part of the Store, in SQL both dialects run: people, sessions, the tenancy tree, API keys.

A mixin of SQLStore (sql.py), one domain per module as sql_catalog.py is.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence

from llmgw.store.driver import Driver, Duplicate, MissingParent, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import (
    ApiKey,
    Identity,
    Membership,
    Org,
    Person,
    PersonToken,
    Project,
    ProjectPath,
    Session,
    Team,
)

_PERSON = (
    "id, email, name, role, password_hash, created_at, disabled, "
    "locale, must_change_password, password_changed_at, suspended_by"
)
_IDENTITY = "source, subject, person_id, created_at, seen_at"
_MEMBERSHIP = "person_id, scope, scope_id, created_at, given_by, administers"
_PERSON_TOKEN = "id, person_id, digest, prefix, created_at, last_used_at, revoked_at"  # noqa: S105 - columns
_SESSION = "id, person_id, created_at, last_seen_at, expires_at, chat_digest, address, agent"
# Failed sign-ins older than this are forgotten on the next write: longer than any throttle window.
_FAILURES_KEPT_S = 86400.0
_KEY = "id, name, project_id, digest, prefix, person_id, band, created_at, expires_at, revoked_at"
# A key read for use also says whether its person is suspended: the key cache
# refuses such a key without a second read (CASE, since `disabled` is INTEGER
# on SQLite and BOOLEAN on PostgreSQL, and a key without a person has none).
_KEY_IN_USE = (", ".join(f"k.{c}" for c in _KEY.split(", "))
               + ", CASE WHEN pe.disabled THEN 1 ELSE 0 END FROM api_keys k LEFT JOIN people pe ON pe.id = k.person_id")
_PATH = (
    "o.id, o.name, o.created_at, t.id, t.org_id, t.name, t.created_at, "
    "p.id, p.team_id, p.name, p.created_at"
)
_PATH_FROM = "projects p JOIN teams t ON t.id = p.team_id JOIN orgs o ON o.id = t.org_id"


def _membership(r: Row) -> Membership:
    return Membership(r[0], r[1], r[2], r[3], r[4], bool(r[5]))


def _person_token(r: Row) -> PersonToken:
    return PersonToken(r[0], r[1], bytes(r[2]), r[3], r[4], r[5], r[6])


def _email_key(email: str) -> str:
    return email.strip().casefold()


def _person(r: Row) -> Person:
    return Person(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], bool(r[8]), r[9], r[10])


def _session(r: Row) -> Session:
    return Session(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), r[6], r[7])


def _key_filter(project_id: str | None, person_id: str | None) -> tuple[str, list[object]]:
    """The WHERE clause (with its leading space, or empty) and its arguments for list_keys and count_keys."""
    terms: list[str] = []
    args: list[object] = []
    for column, value in (("project_id", project_id), ("person_id", person_id)):
        if value is not None:
            args.append(value)
            terms.append(f"{column} = ${len(args)}")
    return ((" WHERE " + " AND ".join(terms)) if terms else "", args)


def _key(r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6], r[7], r[8], r[9])


def _key_in_use(r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6], r[7], r[8], r[9], owner_suspended=bool(r[10]))


def _path(r: Row) -> ProjectPath:
    return ProjectPath(Org(*r[0:3]), Team(*r[3:7]), Project(*r[7:11]))


def _ensured(row: Row | None) -> Row:
    """A row read back after its insert-if-missing, in the same transaction: always there."""
    assert row is not None, "a row inserted or found in this transaction is there to read"
    return row


def _ensured_path(path: ProjectPath | None) -> ProjectPath:
    assert path is not None, "a project just inserted is there to read"
    return path


def _new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(8)}"


class AccountSQL:
    """Store methods for people, sessions, the tenancy tree and API keys; see llmgw.store.Store for each."""

    _db: Driver

    # people and sessions

    async def add_person(self, person: Person) -> Person:
        try:
            await self._db.execute(
                "INSERT INTO people (id, email, email_key, name, role, password_hash, created_at, disabled, "
                "locale, must_change_password, password_changed_at, suspended_by) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                person.id, person.email, _email_key(person.email), person.name, person.role,
                person.password_hash, person.created_at, bool(person.disabled),
                person.locale, bool(person.must_change_password), person.password_changed_at,
                person.suspended_by,
            )
        except Duplicate:
            raise await self._taken(person) from None
        return person

    async def _taken(self, person: Person) -> Conflict:
        holder = await self.person_by_email(person.email)
        if holder is not None and holder.id != person.id:
            return Conflict(
                f"{person.email} already belongs to someone here; "
                "use another email, or find that person with their email"
            )
        return Conflict(f"a person with the id {person.id} already exists")

    async def update_person(self, person: Person) -> Person:
        try:
            row = await self._db.fetchrow(
                "UPDATE people SET email = $2, email_key = $3, name = $4, role = $5, password_hash = $6, "
                "disabled = $7, locale = $8, must_change_password = $9, password_changed_at = $10, "
                "suspended_by = $11 WHERE id = $1 RETURNING id",
                person.id, person.email, _email_key(person.email), person.name, person.role,
                person.password_hash, bool(person.disabled), person.locale,
                bool(person.must_change_password), person.password_changed_at, person.suspended_by,
            )
        except Duplicate:
            raise await self._taken(person) from None
        if row is None:
            raise StoreError(f"there is no person with the id {person.id} to change")
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
                f"INSERT INTO sessions ({_SESSION}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                session.id, session.person_id, session.created_at, session.last_seen_at,
                session.expires_at, bytes(session.chat_digest), session.address, session.agent,
            )
        except MissingParent:
            raise StoreError(
                f"there is no person with the id {session.person_id} to sign in"
            ) from None
        except Duplicate:
            raise Conflict("that session already exists") from None

    async def session_by_id(self, session_id: str) -> Session | None:
        row = await self._db.fetchrow(f"SELECT {_SESSION} FROM sessions WHERE id = $1", session_id)
        return None if row is None else _session(row)

    async def session_by_chat_digest(self, digest: bytes) -> Session | None:
        row = await self._db.fetchrow(
            f"SELECT {_SESSION} FROM sessions WHERE chat_digest = $1", bytes(digest)
        )
        return None if row is None else _session(row)

    async def touch_session(self, session_id: str, at: float) -> None:
        # Never backwards: two requests of one browser may land out of order.
        await self._db.execute(
            "UPDATE sessions SET last_seen_at = $2 WHERE id = $1 AND last_seen_at < $2", session_id, at
        )

    async def list_sessions(self, person_id: str) -> list[Session]:
        rows = await self._db.fetch(
            f"SELECT {_SESSION} FROM sessions WHERE person_id = $1 ORDER BY last_seen_at DESC, id",
            person_id,
        )
        return [_session(r) for r in rows]

    async def delete_session(self, session_id: str) -> None:
        await self._db.execute("DELETE FROM sessions WHERE id = $1", session_id)

    async def delete_sessions(self, person_id: str, keep: str | None = None) -> int:
        rows = await self._db.fetch(
            "DELETE FROM sessions WHERE person_id = $1 AND id <> $2 RETURNING id", person_id, keep or ""
        )
        return len(rows)

    # memberships

    async def add_membership(self, m: Membership) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO memberships ({_MEMBERSHIP}) VALUES ($1, $2, $3, $4, $5, $6) "
                "ON CONFLICT (person_id, scope, scope_id) DO NOTHING",
                m.person_id, m.scope, m.scope_id, m.created_at, m.given_by, bool(m.administers),
            )
        except MissingParent:
            raise StoreError(f"there is no person with the id {m.person_id} to make a member") from None

    async def remove_membership(self, person_id: str, scope: str, scope_id: str) -> None:
        await self._db.execute(
            "DELETE FROM memberships WHERE person_id = $1 AND scope = $2 AND scope_id = $3",
            person_id, scope, scope_id,
        )

    async def memberships(self, person_id: str) -> list[Membership]:
        rows = await self._db.fetch(
            f"SELECT {_MEMBERSHIP} FROM memberships WHERE person_id = $1 "
            "ORDER BY scope, scope_id", person_id,
        )
        return [_membership(r) for r in rows]

    async def members_of(self, scope: str, scope_id: str) -> list[Membership]:
        rows = await self._db.fetch(
            f"SELECT {_MEMBERSHIP} FROM memberships WHERE scope = $1 AND scope_id = $2 "
            "ORDER BY person_id", scope, scope_id,
        )
        return [_membership(r) for r in rows]

    async def set_administers(self, person_id: str, scope: str, scope_id: str, administers: bool) -> bool:
        rows = await self._db.fetch(
            "UPDATE memberships SET administers = $4 WHERE person_id = $1 AND scope = $2 AND scope_id = $3 "
            "RETURNING person_id", person_id, scope, scope_id, bool(administers),
        )
        return bool(rows)

    async def administrators(self) -> list[Membership]:
        rows = await self._db.fetch(
            f"SELECT {_MEMBERSHIP} FROM memberships WHERE administers ORDER BY person_id, scope, scope_id")
        return [_membership(r) for r in rows]

    # a person's own tokens for the admin API

    async def add_person_token(self, token: PersonToken) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO person_tokens ({_PERSON_TOKEN}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                token.id, token.person_id, bytes(token.digest), token.prefix, token.created_at,
                token.last_used_at, token.revoked_at,
            )
        except Duplicate:
            raise Conflict(f"another token already has the secret of {token.prefix}…; make a new one") from None
        except MissingParent:
            raise StoreError(f"there is no person with the id {token.person_id} to give a token") from None

    async def person_token_by_digest(self, digest: bytes) -> PersonToken | None:
        row = await self._db.fetchrow(f"SELECT {_PERSON_TOKEN} FROM person_tokens WHERE digest = $1", bytes(digest))
        return None if row is None else _person_token(row)

    async def person_tokens(self, person_id: str) -> list[PersonToken]:
        rows = await self._db.fetch(
            f"SELECT {_PERSON_TOKEN} FROM person_tokens WHERE person_id = $1 ORDER BY created_at DESC, id",
            person_id)
        return [_person_token(r) for r in rows]

    async def revoke_person_token(self, token_id: str, at: float) -> PersonToken | None:
        await self._db.execute(
            "UPDATE person_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL", token_id, at)
        row = await self._db.fetchrow(f"SELECT {_PERSON_TOKEN} FROM person_tokens WHERE id = $1", token_id)
        return None if row is None else _person_token(row)

    async def touch_person_token(self, token_id: str, at: float) -> None:
        await self._db.execute(
            "UPDATE person_tokens SET last_used_at = $2 WHERE id = $1 "
            "AND (last_used_at IS NULL OR last_used_at < $2)", token_id, at)

    # identities: a person as a directory knows them

    async def add_identity(self, identity: Identity) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO identities ({_IDENTITY}) VALUES ($1, $2, $3, $4, $5)",
                identity.source, identity.subject, identity.person_id, identity.created_at, identity.seen_at,
            )
        except MissingParent:
            raise StoreError(f"there is no person with the id {identity.person_id} to tie to a directory") from None
        except Duplicate:
            raise Conflict(f"{identity.source} already ties {identity.subject} to an account") from None

    async def identity(self, source: str, subject: str) -> Identity | None:
        row = await self._db.fetchrow(
            f"SELECT {_IDENTITY} FROM identities WHERE source = $1 AND subject = $2", source, subject)
        return None if row is None else Identity(*row)

    async def identities_of(self, person_id: str) -> list[Identity]:
        rows = await self._db.fetch(
            f"SELECT {_IDENTITY} FROM identities WHERE person_id = $1 ORDER BY source, subject", person_id)
        return [Identity(*r) for r in rows]

    async def list_identities(self, source: str) -> list[Identity]:
        rows = await self._db.fetch(
            f"SELECT {_IDENTITY} FROM identities WHERE source = $1 ORDER BY subject", source)
        return [Identity(*r) for r in rows]

    async def touch_identity(self, source: str, subject: str, at: float) -> None:
        await self._db.execute(
            "UPDATE identities SET seen_at = $3 WHERE source = $1 AND subject = $2 AND seen_at < $3",
            source, subject, at)

    async def delete_identity(self, source: str, subject: str) -> None:
        await self._db.execute("DELETE FROM identities WHERE source = $1 AND subject = $2", source, subject)

    # sealed secrets (sealed under the master key by the caller; the store never sees them in the clear)

    async def put_sealed_secret(self, name: str, sealed: bytes, at: float) -> None:
        await self._db.execute(
            "INSERT INTO sealed_secrets (name, sealed, updated_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at",
            name, bytes(sealed), at)

    async def sealed_secret(self, name: str) -> bytes | None:
        value = await self._db.fetchval("SELECT sealed FROM sealed_secrets WHERE name = $1", name)
        return None if value is None else bytes(value)

    async def delete_sealed_secret(self, name: str) -> bool:
        rows = await self._db.fetch("DELETE FROM sealed_secrets WHERE name = $1 RETURNING name", name)
        return bool(rows)

    async def list_sealed_secrets(self, prefix: str) -> list[str]:
        # Names only: what is kept is shown (GET /api/v1/auth), what it holds never leaves the store.
        rows = await self._db.fetch("SELECT name FROM sealed_secrets ORDER BY name")
        return [r[0] for r in rows if r[0].startswith(prefix)]

    # failed sign-ins

    async def add_sign_in_failure(self, subjects: Sequence[str], at: float) -> None:
        async with self._db.transaction() as tx:
            await tx.execute("DELETE FROM sign_in_failures WHERE at < $1", at - _FAILURES_KEPT_S)
            await tx.executemany(
                "INSERT INTO sign_in_failures (subject, at) VALUES ($1, $2)", [(s, at) for s in subjects]
            )

    async def sign_in_failures(self, subject: str, since: float) -> int:
        return int(await self._db.fetchval(
            "SELECT COUNT(*) FROM sign_in_failures WHERE subject = $1 AND at >= $2", subject, since
        ))

    async def clear_sign_in_failures(self, subject: str) -> None:
        await self._db.execute("DELETE FROM sign_in_failures WHERE subject = $1", subject)

    async def spend_sign_in(self, digest: str, at: float, until: float) -> bool:
        await self._db.execute("DELETE FROM spent_sign_ins WHERE until_at < $1", at)
        try:
            # The primary key decides between two callbacks at once, on any control plane or worker.
            await self._db.execute("INSERT INTO spent_sign_ins (digest, until_at) VALUES ($1, $2)", digest, until)
        except Duplicate:
            return False
        return True

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

    async def create_org(self, name: str) -> Org:
        org = Org(_new_id("org"), name, time.time())
        try:
            await self._db.execute(
                "INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3)", org.id, org.name, org.created_at
            )
        except Duplicate:
            raise Conflict(f"there is already an org named {name}") from None
        return org

    async def create_team(self, org_id: str, name: str) -> Team:
        team = Team(_new_id("team"), org_id, name, time.time())
        try:
            await self._db.execute(
                "INSERT INTO teams (id, org_id, name, created_at) VALUES ($1, $2, $3, $4)",
                team.id, team.org_id, team.name, team.created_at,
            )
        except Duplicate:
            raise Conflict(f"that org already has a team named {name}") from None
        except MissingParent:
            raise StoreError(f"there is no org with the id {org_id} to hold the team {name}") from None
        return team

    async def create_project(self, team_id: str, name: str) -> ProjectPath:
        project = Project(_new_id("prj"), team_id, name, time.time())
        try:
            await self._db.execute(
                "INSERT INTO projects (id, team_id, name, created_at) VALUES ($1, $2, $3, $4)",
                project.id, project.team_id, project.name, project.created_at,
            )
        except Duplicate:
            raise Conflict(f"that team already has a project named {name}") from None
        except MissingParent:
            raise StoreError(f"there is no team with the id {team_id} to hold the project {name}") from None
        return _ensured_path(await self.project_path(project.id))

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
        row = await self._db.fetchrow(f"SELECT {_KEY_IN_USE} WHERE k.digest = $1", bytes(digest))
        return None if row is None else _key_in_use(row)

    async def key_by_id(self, key_id: str) -> ApiKey | None:
        row = await self._db.fetchrow(f"SELECT {_KEY_IN_USE} WHERE k.id = $1", key_id)
        return None if row is None else _key_in_use(row)

    async def list_keys(self, project_id: str | None = None, *, person_id: str | None = None,
                        limit: int | None = None, offset: int = 0) -> list[ApiKey]:
        where, args = _key_filter(project_id, person_id)
        page = ""
        if limit is not None:
            args += [limit, offset]
            page = f" LIMIT ${len(args) - 1} OFFSET ${len(args)}"
        rows = await self._db.fetch(f"SELECT {_KEY} FROM api_keys{where} ORDER BY created_at, id{page}", *args)
        return [_key(r) for r in rows]

    async def count_keys(self, project_id: str | None = None, *, person_id: str | None = None) -> int:
        where, args = _key_filter(project_id, person_id)
        return int(await self._db.fetchval(f"SELECT COUNT(*) FROM api_keys{where}", *args))

    async def revoke_key(self, key_id: str, at: float) -> ApiKey | None:
        # COALESCE keeps the first revocation's time: revoking twice (a retry,
        # two administrators) must not rewrite when the key stopped working.
        row = await self._db.fetchrow(
            f"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING {_KEY}",
            key_id, at,
        )
        return None if row is None else _key(row)
