"""Store methods for SCIM provisioning: the provider's users and groups, and who is in which group.

userName and displayName are unique without regard to case (RFC 7643 2.1
calls userName case-insensitive; the group maps match displayName so), kept
unique by a folded column each, so a duplicate is the database's Conflict
even when two provider requests race.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.store.driver import Driver, Duplicate, MissingParent, Row
from llmgw.store.errors import Conflict, StoreError
from llmgw.store.records import ScimGroup, ScimUser
from llmgw.store.sql_json import dump_json, load_json

_USER = "id, person_id, user_name, external_id, data, created_at, updated_at"
_GROUP = "id, display_name, external_id, created_at, updated_at"


def _user(r: Row) -> ScimUser:
    return ScimUser(r[0], r[1], r[2], r[3], load_json(r[4]) or {}, r[5], r[6])


def _group(r: Row) -> ScimGroup:
    return ScimGroup(*r)


class ScimSQL:
    """See llmgw.store.Store's SCIM section for each method."""

    _db: Driver

    # users

    async def add_scim_user(self, user: ScimUser) -> None:
        try:
            await self._db.execute(
                "INSERT INTO scim_users (id, person_id, user_name, user_name_key, external_id, data, created_at, "
                "updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                user.id, user.person_id, user.user_name, user.user_name.casefold(), user.external_id,
                dump_json(user.data), user.created_at, user.updated_at)
        except MissingParent:
            raise StoreError(f"there is no person with the id {user.person_id} to provision") from None
        except Duplicate:
            raise Conflict(f"the userName {user.user_name} or its account is already provisioned") from None

    async def update_scim_user(self, user: ScimUser) -> None:
        try:
            await self._db.execute(
                "UPDATE scim_users SET user_name = $2, user_name_key = $3, external_id = $4, data = $5, "
                "updated_at = $6 WHERE id = $1",
                user.id, user.user_name, user.user_name.casefold(), user.external_id, dump_json(user.data),
                user.updated_at)
        except Duplicate:
            raise Conflict(f"the userName {user.user_name} is already provisioned") from None

    async def scim_user(self, user_id: str) -> ScimUser | None:
        row = await self._db.fetchrow(f"SELECT {_USER} FROM scim_users WHERE id = $1", user_id)
        return None if row is None else _user(row)

    async def scim_user_by_name(self, user_name: str) -> ScimUser | None:
        row = await self._db.fetchrow(f"SELECT {_USER} FROM scim_users WHERE user_name_key = $1",
                                      user_name.casefold())
        return None if row is None else _user(row)

    async def scim_user_of(self, person_id: str) -> ScimUser | None:
        row = await self._db.fetchrow(f"SELECT {_USER} FROM scim_users WHERE person_id = $1", person_id)
        return None if row is None else _user(row)

    async def list_scim_users(self) -> list[ScimUser]:
        return [_user(r) for r in await self._db.fetch(f"SELECT {_USER} FROM scim_users ORDER BY created_at, id")]

    async def delete_scim_user(self, user_id: str) -> bool:
        async with self._db.transaction() as tx:
            row = await tx.fetchrow("DELETE FROM scim_users WHERE id = $1 RETURNING person_id", user_id)
            if row is None:
                return False
            # A deleted user is in no group: the account stays (suspended), its SCIM groups go.
            await tx.execute("DELETE FROM scim_group_members WHERE person_id = $1", row[0])
        return True

    # groups

    async def add_scim_group(self, group: ScimGroup) -> None:
        try:
            await self._db.execute(
                f"INSERT INTO scim_groups ({_GROUP}, display_key) VALUES ($1, $2, $3, $4, $5, $6)",
                group.id, group.display_name, group.external_id, group.created_at, group.updated_at,
                group.display_name.casefold())
        except Duplicate:
            raise Conflict(f"there is already a group named {group.display_name}") from None

    async def update_scim_group(self, group: ScimGroup) -> None:
        try:
            await self._db.execute(
                "UPDATE scim_groups SET display_name = $2, display_key = $3, external_id = $4, updated_at = $5 "
                "WHERE id = $1",
                group.id, group.display_name, group.display_name.casefold(), group.external_id, group.updated_at)
        except Duplicate:
            raise Conflict(f"there is already a group named {group.display_name}") from None

    async def scim_group(self, group_id: str) -> ScimGroup | None:
        row = await self._db.fetchrow(f"SELECT {_GROUP} FROM scim_groups WHERE id = $1", group_id)
        return None if row is None else _group(row)

    async def scim_group_by_name(self, display_name: str) -> ScimGroup | None:
        row = await self._db.fetchrow(f"SELECT {_GROUP} FROM scim_groups WHERE display_key = $1",
                                      display_name.casefold())
        return None if row is None else _group(row)

    async def list_scim_groups(self) -> list[ScimGroup]:
        return [_group(r) for r in await self._db.fetch(f"SELECT {_GROUP} FROM scim_groups ORDER BY created_at, id")]

    async def delete_scim_group(self, group_id: str) -> list[str]:
        async with self._db.transaction() as tx:
            members = [r[0] for r in await tx.fetch(
                "SELECT person_id FROM scim_group_members WHERE group_id = $1 ORDER BY person_id", group_id)]
            await tx.execute("DELETE FROM scim_group_members WHERE group_id = $1", group_id)
            await tx.execute("DELETE FROM scim_groups WHERE id = $1", group_id)
        return members

    async def scim_group_members(self, group_id: str) -> list[str]:
        rows = await self._db.fetch(
            "SELECT person_id FROM scim_group_members WHERE group_id = $1 ORDER BY person_id", group_id)
        return [r[0] for r in rows]

    async def add_scim_group_members(self, group_id: str, person_ids: Sequence[str]) -> None:
        if not person_ids:
            return
        try:
            await self._db.executemany(
                "INSERT INTO scim_group_members (group_id, person_id) VALUES ($1, $2) "
                "ON CONFLICT (group_id, person_id) DO NOTHING",
                [(group_id, p) for p in person_ids])
        except MissingParent:
            raise StoreError(f"the group {group_id} or one of its members is not in the store") from None

    async def remove_scim_group_members(self, group_id: str, person_ids: Sequence[str]) -> None:
        if person_ids:
            await self._db.executemany(
                "DELETE FROM scim_group_members WHERE group_id = $1 AND person_id = $2",
                [(group_id, p) for p in person_ids])

    async def scim_groups_of(self, person_id: str) -> list[ScimGroup]:
        rows = await self._db.fetch(
            f"SELECT {', '.join('g.' + c.strip() for c in _GROUP.split(','))} FROM scim_groups g "
            "JOIN scim_group_members m ON m.group_id = g.id WHERE m.person_id = $1 ORDER BY g.display_key",
            person_id)
        return [_group(r) for r in rows]
