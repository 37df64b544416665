"""An Entra ID-shaped provisioning run against /scim/v2: its exact bodies, capitalised ops and string booleans."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor, Sessions
from llmgw.auth.directory import scim_name_link
from llmgw.config.auth import SCIMSettings
from llmgw.store import Person
from tests.auth.scimkit import Plane, bearer, scim_app

PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
SETTINGS = SCIMSettings(enabled=True, roles={"admin": ["LLMGW Admins"]},
                        memberships={"ML Engineers": "team:Acme/ml"})

# What Entra ID's provisioning service posts for a new user (its SCIM validator's shape).
ENTRA_USER = {
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],
    "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
    "userName": "ada@corp.example",
    "active": True,
    "emails": [{"primary": True, "type": "work", "value": "ada@corp.example"}],
    "meta": {"resourceType": "User"},
    "name": {"formatted": "Ada Lovelace", "familyName": "Lovelace", "givenName": "Ada"},
    "roles": [],
    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {"department": "Research"},
}
ENTRA_GROUP = {
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group",
                "http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/2.0/Group"],
    "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
    "displayName": "ML Engineers",
    "meta": {"resourceType": "Group"},
}


def op(*operations: dict) -> dict:
    return {"schemas": [PATCH_OP], "Operations": list(operations)}


@pytest.fixture
async def plane(store, tmp_path):
    await store.ensure_project("Acme", "ml", "search")
    return Plane(store, SETTINGS, str(tmp_path))


@pytest.fixture
async def gateway(plane, store):
    async with TestClient(TestServer(scim_app(plane))) as client:
        client.headers = await bearer(store)
        yield client


async def _portal_session(store, email: str) -> str:
    person = await store.person_by_email(email)
    signed = await Sessions(store, lambda: Plane(store, SETTINGS, "/").settings.current.auth).open(
        person, address="127.0.0.1")
    return signed.token


async def _profile(gateway, token: str) -> int:
    async with gateway.get("/profile", cookies={"llmgw_session": token}, allow_redirects=False) as r:
        return r.status


async def test_entra_creates_a_user_who_is_then_suspended_by_a_string_false_and_reinstated_by_true(gateway, store):
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        assert r.status == 201 and r.content_type == "application/scim+json"
        made = await r.json()
        assert r.headers["Location"] == made["meta"]["location"] and made["meta"]["location"].endswith(made["id"])
    assert made["active"] is True and made["externalId"] == ENTRA_USER["externalId"]
    assert made["urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"] == {"department": "Research"}
    person = await store.person_by_email("ada@corp.example")
    assert (person.name, person.password_hash, person.disabled) == ("Ada Lovelace", None, False)
    token = await _portal_session(store, "ada@corp.example")
    assert await _profile(gateway, token) == 200

    async with gateway.patch(f"/scim/v2/Users/{made['id']}", headers=gateway.headers,
                             json=op({"op": "Replace", "path": "active", "value": "False"})) as r:
        assert r.status == 200 and (await r.json())["active"] is False
    suspended = await store.person_by_id(person.id)
    assert (suspended.disabled, suspended.suspended_by) == (True, "scim")
    assert await _profile(gateway, token) == 303  # the portal session ended with the suspension

    async with gateway.patch(f"/scim/v2/Users/{made['id']}", headers=gateway.headers,
                             json=op({"op": "Replace", "value": {"active": "True"}})) as r:
        assert r.status == 200 and (await r.json())["active"] is True
    assert (await store.person_by_id(person.id)).disabled is False


async def test_a_suspended_users_api_key_is_refused_at_once_and_let_in_again_on_reactivation(gateway, store, plane):
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        made = await r.json()
    _, secret = await Accounts(store).create_key(Actor("root", "cli"), name="laptop", project="Acme/ml/search",
                                                 person_email="ada@corp.example", create=True)
    assert (await plane.keys.lookup(secret)).refusal(time.time()) is None  # cached for an hour from now on

    for value, refused in (("False", True), ("True", False)):
        async with gateway.patch(f"/scim/v2/Users/{made['id']}", headers=gateway.headers,
                                 json=op({"op": "Replace", "path": "active", "value": value})) as r:
            assert r.status == 200
        refusal = (await plane.keys.lookup(secret)).refusal(time.time())
        assert (refusal is not None and "suspended" in refusal) == refused


async def test_a_suspension_an_administrator_made_is_not_lifted_by_the_provider(gateway, store):
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        made = await r.json()
    person = await store.person_by_email("ada@corp.example")
    await store.update_person(replace(await store.person_by_id(person.id), disabled=True, suspended_by="admin"))

    async with gateway.patch(f"/scim/v2/Users/{made['id']}", headers=gateway.headers,
                             json=op({"op": "replace", "path": "active", "value": True})) as r:
        assert r.status == 200 and (await r.json())["active"] is False
    assert (await store.person_by_id(person.id)).suspended_by == "admin"


async def test_entra_renames_a_user_through_filtered_and_dotted_paths(gateway, store):
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        made = await r.json()
    async with gateway.patch(f"/scim/v2/Users/{made['id']}", headers=gateway.headers, json=op(
            {"op": "Replace", "path": 'emails[type eq "work"].value', "value": "ada.king@corp.example"},
            {"op": "Replace", "path": "name.formatted", "value": "Ada King"},
            {"op": "Add", "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber",
             "value": "1815"})) as r:
        changed = await r.json()
        assert r.status == 200, changed
    assert changed["emails"] == [{"primary": True, "type": "work", "value": "ada.king@corp.example"}]
    assert changed["urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"]["employeeNumber"] == "1815"
    person = await store.person_by_id((await store.scim_user(made["id"])).person_id)
    assert (person.email, person.name) == ("ada.king@corp.example", "Ada King")


async def test_group_membership_gives_and_takes_the_mapped_role_and_place(gateway, store):
    # Another admin, so Ada is not the last one, whose role a directory never takes.
    await store.add_person(Person(id="usr_root", email="root@corp.example", name="Root", role="admin"))
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        ada = await r.json()
    person_id = (await store.scim_user(ada["id"])).person_id
    async with gateway.post("/scim/v2/Groups", json=ENTRA_GROUP, headers=gateway.headers) as r:
        assert r.status == 201
        ml = await r.json()
    async with gateway.patch(f"/scim/v2/Groups/{ml['id']}", headers=gateway.headers, json=op(
            {"op": "Add", "path": "members", "value": [{"$ref": None, "value": ada["id"]}]})) as r:
        assert r.status == 200, await r.text()
    [joined] = await store.memberships(person_id)
    assert (joined.scope, joined.given_by) == ("team", "scim")

    admins = ENTRA_GROUP | {"displayName": "llmgw admins", "externalId": "x-2", "members": [{"value": ada["id"]}]}
    async with gateway.post("/scim/v2/Groups", json=admins, headers=gateway.headers) as r:
        assert r.status == 201
        admin_group = await r.json()
    assert (await store.person_by_id(person_id)).role == "admin"
    async with gateway.get("/scim/v2/Groups", params={"filter": f'members[value eq "{ada["id"]}"]',
                                                      "attributes": "displayName"}, headers=gateway.headers) as r:
        listed = await r.json()
    assert sorted(g["displayName"] for g in listed["Resources"]) == ["ML Engineers", "llmgw admins"]
    assert all("members" not in g for g in listed["Resources"])

    async with gateway.patch(f"/scim/v2/Groups/{ml['id']}", headers=gateway.headers, json=op(
            {"op": "Remove", "path": f'members[value eq "{ada["id"]}"]'})) as r:
        assert r.status == 200 and "members" not in await r.json()
    assert await store.memberships(person_id) == []
    async with gateway.delete(f"/scim/v2/Groups/{admin_group['id']}", headers=gateway.headers) as r:
        assert r.status == 204
    assert (await store.person_by_id(person_id)).role == "member"


async def test_entras_older_member_removal_with_a_value_list_removes_just_those(gateway, store):
    ids = []
    for name in ("ada", "bob"):
        body = ENTRA_USER | {"userName": f"{name}@corp.example", "externalId": name,
                             "emails": [{"primary": True, "type": "work", "value": f"{name}@corp.example"}]}
        async with gateway.post("/scim/v2/Users", json=body, headers=gateway.headers) as r:
            ids.append((await r.json())["id"])
    async with gateway.post("/scim/v2/Groups", headers=gateway.headers,
                            json=ENTRA_GROUP | {"members": [{"value": i} for i in ids]}) as r:
        group = await r.json()
    async with gateway.patch(f"/scim/v2/Groups/{group['id']}", headers=gateway.headers, json=op(
            {"op": "Remove", "path": "members", "value": [{"$ref": None, "value": ids[0]}]})) as r:
        assert [m["value"] for m in (await r.json())["members"]] == [ids[1]]


async def test_a_deleted_user_is_suspended_and_untied_and_the_account_stays(gateway, store):
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        made = await r.json()
    person_id = (await store.scim_user(made["id"])).person_id
    async with gateway.delete(f"/scim/v2/Users/{made['id']}", headers=gateway.headers) as r:
        assert r.status == 204
    async with gateway.get(f"/scim/v2/Users/{made['id']}", headers=gateway.headers) as r:
        assert r.status == 404
    person = await store.person_by_id(person_id)
    # Untied from the user's id; linked to its userName, so that pushing it again takes the account back.
    assert person.disabled
    assert [i.subject for i in await store.identities_of(person_id)] == [scim_name_link(ENTRA_USER["userName"])]

    # Pushed again, the same e-mail takes the account back, active.
    async with gateway.post("/scim/v2/Users", json=ENTRA_USER, headers=gateway.headers) as r:
        again = await r.json()
        assert r.status == 201 and again["id"] != made["id"] and again["active"] is True
    assert (await store.scim_user(again["id"])).person_id == person_id


async def test_users_are_found_by_filter_and_paged(gateway, store):
    for n in range(5):
        body = ENTRA_USER | {"userName": f"user{n}@corp.example", "externalId": f"ext-{n}", "active": n % 2 == 0,
                             "emails": [{"primary": True, "type": "work", "value": f"user{n}@corp.example"}]}
        async with gateway.post("/scim/v2/Users", json=body, headers=gateway.headers) as r:
            assert r.status == 201
    async def names(**params) -> tuple[int, list[str]]:
        async with gateway.get("/scim/v2/Users", params=params, headers=gateway.headers) as r:
            assert r.status == 200, await r.text()
            found = await r.json()
        return found["totalResults"], [u["userName"] for u in found["Resources"]]

    assert await names(filter='userName eq "USER3@corp.example"') == (1, ["user3@corp.example"])
    assert await names(filter='externalId eq "ext-1" or externalId eq "ext-2"') == (
        2, ["user1@corp.example", "user2@corp.example"])
    assert (await names(filter="active eq false"))[0] == 2
    assert (await names(filter='emails.value sw "user4" and active eq true')) == (1, ["user4@corp.example"])
    assert (await names(filter='emails[type eq "work" and value co "3@"]'))[1] == ["user3@corp.example"]
    assert (await names(filter="externalId pr", startIndex="2", count="2")) == (
        5, ["user1@corp.example", "user2@corp.example"])
    assert (await names(filter='not (userName ew "0@corp.example")'))[0] == 4
