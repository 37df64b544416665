"""SCIM Groups: a group's displayName is what auth.scim.roles and auth.scim.memberships name.

Members are kept per account; after every change each member added or
removed (all of them when a group is renamed or deleted) has their role
and places moved to the groups they are in now, through
DirectoryAccounts.follow, as an LDAP sync would.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from llmgw.auth.scim.errors import ScimError
from llmgw.auth.scim.filter import Compare, lookup, matches, mentions
from llmgw.auth.scim.patch import apply_patch
from llmgw.auth.scim.provisioning import ACTOR, Provisioning
from llmgw.auth.scim.resources import Query, resource_body, when
from llmgw.auth.scim.schemas import GROUP
from llmgw.errors import N_
from llmgw.store import Conflict, ScimGroup

_MAX_NAME = 256


def _parsed(body: Any) -> tuple[str, str | None, list[str] | None]:
    body = resource_body(body)
    name = lookup(body, "displayName")
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
        raise ScimError(400, N_("a group needs a displayName of 1-{most} characters"), scim_type="invalidValue",
                        params={"most": _MAX_NAME})
    external_id = lookup(body, "externalId")
    if external_id is not None and not isinstance(external_id, str):
        raise ScimError(400, N_("externalId is a string"), scim_type="invalidValue")
    members = lookup(body, "members")
    if members is None:
        return name.strip(), external_id, None
    if not isinstance(members, list) or not all(isinstance(m, dict) and isinstance(m.get("value"), str)
                                                for m in members):
        raise ScimError(400, N_('members is a list of {"value": USER_ID}'), scim_type="invalidValue")
    return name.strip(), external_id, list(dict.fromkeys(m["value"] for m in members))


def _view(group: ScimGroup) -> dict[str, Any]:
    return {"id": group.id, "displayName": group.display_name, "externalId": group.external_id}


def _taken(name: str) -> ScimError:
    return ScimError(409, N_("there is already a group named {name}"), scim_type="uniqueness", params={"name": name})


class Groups:
    def __init__(self, provisioning: Provisioning):
        self.p = provisioning
        self.store = provisioning.store

    async def _user_ids(self) -> dict[str, str]:
        return {u.person_id: u.id for u in await self.store.list_scim_users()}

    async def _people(self, user_ids: list[str]) -> list[str]:
        people = []
        for user_id in user_ids:
            user = await self.store.scim_user(user_id)
            if user is None:
                raise ScimError(400, N_("there is no user {id} to make a member"), scim_type="invalidValue",
                                params={"id": user_id[:100]})
            people.append(user.person_id)
        return people

    def resource(self, group: ScimGroup, members: list[str] | None, user_ids: dict[str, str],
                 base: str) -> dict[str, Any]:
        out: dict[str, Any] = {"schemas": [GROUP], "id": group.id, "displayName": group.display_name}
        if group.external_id:
            out["externalId"] = group.external_id
        if members:
            out["members"] = [{"value": user_ids[p], "$ref": f"{base}/Users/{user_ids[p]}"}
                              for p in members if p in user_ids]
        out["meta"] = {"resourceType": "Group", "created": when(group.created_at),
                       "lastModified": when(group.updated_at), "location": f"{base}/Groups/{group.id}"}
        return out

    async def found(self, group_id: str) -> ScimGroup:
        group = await self.store.scim_group(group_id)
        if group is None:
            raise ScimError(404, N_("there is no group {id}"), params={"id": group_id[:100]})
        return group

    async def read(self, group_id: str, base: str, query: Query | None = None) -> dict[str, Any]:
        group = await self.found(group_id)
        if query is not None and not query.wants("members"):
            return self.resource(group, None, {}, base)
        return self.resource(group, await self.store.scim_group_members(group.id), await self._user_ids(), base)

    async def search(self, query: Query, base: str) -> tuple[int, list[dict[str, Any]]]:
        where = query.where
        groups: list[ScimGroup]
        if isinstance(where, Compare) and where.op == "eq" and where.attr.urn is None \
                and len(where.attr.names) == 1 and isinstance(where.value, str) \
                and where.attr.names[0].casefold() in ("displayname", "id"):
            one = await (self.store.scim_group_by_name(where.value)
                         if where.attr.names[0].casefold() == "displayname" else self.store.scim_group(where.value))
            groups = [] if one is None else [one]
        else:
            groups = await self.store.list_scim_groups()
        # A group's members cost a read each: only when returned or filtered on (Entra asks without them).
        with_members = query.wants("members") or mentions(where, "members")
        user_ids = await self._user_ids() if with_members and groups else {}
        found = []
        for group in groups:
            members = await self.store.scim_group_members(group.id) if with_members else None
            resource = self.resource(group, members, user_ids, base)
            if where is None or matches(where, resource):
                found.append(resource)
        return len(found), found[query.start - 1:query.start - 1 + query.count]

    async def create(self, body: Any, base: str) -> dict[str, Any]:
        name, external_id, member_ids = _parsed(body)
        if await self.store.scim_group_by_name(name) is not None:
            raise _taken(name)
        people = await self._people(member_ids or [])
        now = time.time()
        group = ScimGroup(str(uuid.uuid4()), name, external_id, now, now)
        try:
            await self.store.add_scim_group(group)
        except Conflict:
            raise _taken(name) from None
        await self.store.add_scim_group_members(group.id, people)
        await self.p.audit(ACTOR, "scim.group.create", f"scim-group:{group.id}", None,
                           _view(group) | {"members": len(people)})
        await self.p.follow_people(people)
        return self.resource(group, people, await self._user_ids(), base)

    async def replace(self, group_id: str, body: Any, base: str) -> dict[str, Any]:
        group = await self.found(group_id)
        name, external_id, member_ids = _parsed(body)
        if name.casefold() != group.display_name.casefold():
            other = await self.store.scim_group_by_name(name)
            if other is not None and other.id != group.id:
                raise _taken(name)
        before = await self.store.scim_group_members(group.id)
        wanted = await self._people(member_ids or [])
        after = replace(group, display_name=name, external_id=external_id,
                        updated_at=max(time.time(), group.updated_at))
        try:
            await self.store.update_scim_group(after)
        except Conflict:
            raise _taken(name) from None
        joined = [p for p in wanted if p not in set(before)]
        left = [p for p in before if p not in set(wanted)]
        await self.store.add_scim_group_members(group.id, joined)
        await self.store.remove_scim_group_members(group.id, left)
        if _view(after) != _view(group) or joined or left:
            await self.p.audit(ACTOR, "scim.group.update", f"scim-group:{group.id}", _view(group),
                               _view(after) | {"joined": len(joined), "left": len(left)})
        renamed = after.display_name != group.display_name
        await self.p.follow_people(wanted + left if renamed else joined + left)
        return self.resource(after, await self.store.scim_group_members(group.id), await self._user_ids(), base)

    async def patch(self, group_id: str, body: Any, base: str) -> dict[str, Any]:
        current = await self.read(group_id, base)
        return await self.replace(group_id, apply_patch(current, body), base)

    async def delete(self, group_id: str) -> None:
        group = await self.found(group_id)
        members = await self.store.delete_scim_group(group.id)
        await self.p.audit(ACTOR, "scim.group.delete", f"scim-group:{group.id}", _view(group), None)
        await self.p.follow_people(members)
