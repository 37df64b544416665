"""What a provider is told and what is kept: SCIM's error shape with the right status, the token, the audit."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.auth.scim import make_token, token_made
from llmgw.config.auth import SCIMSettings
from tests.auth.scimkit import SCIM, Plane, bearer, scim_app, settings_with

ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
ADA = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "ada@corp.example",
       "emails": [{"value": "ada@corp.example", "primary": True}], "active": True}


@pytest.fixture
async def plane(store, tmp_path):
    return Plane(store, SCIMSettings(enabled=True), str(tmp_path))


@pytest.fixture
async def gateway(plane, store):
    async with TestClient(TestServer(scim_app(plane))) as client:
        client.headers = await bearer(store)
        yield client


async def _error(response) -> dict:
    assert response.content_type == SCIM
    body = await response.json()
    assert body["schemas"] == [ERROR] and body["status"] == str(response.status) and body["detail"]
    return body


async def test_a_wrong_or_missing_token_is_refused_with_401_in_scims_shape(gateway):
    for headers in ({"Authorization": "Bearer scim_not-the-token"}, {}, {"Authorization": "Basic eDp5"}):
        async with gateway.get("/scim/v2/Users", headers=headers) as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            assert "llmgw ctl auth scim-token" in (await _error(r))["detail"]


async def test_a_new_token_replaces_the_old_within_seconds_and_says_when_it_was_made(gateway, store):
    old = gateway.headers["Authorization"]
    async with gateway.get("/scim/v2/Users", headers=gateway.headers) as r:
        assert r.status == 200
    made = await token_made(store)
    new = await make_token(store)
    assert new.startswith("scim_") and await token_made(store) >= made
    stored = await store.sealed_secret("scim/token-digest")
    assert new.encode() not in stored  # only its digest is kept

    async def answers(header: str) -> int:
        async with gateway.get("/scim/v2/Users", headers={"Authorization": header}) as r:
            return r.status

    # The expected digest is kept a few seconds: poll, with a bound, for the new token to be taken.
    deadline = time.monotonic() + 15
    while await answers(f"Bearer {new}") != 200:
        assert time.monotonic() < deadline, "the new SCIM token was never taken"
        await asyncio.sleep(0.1)
    assert await answers(old) == 401


async def test_with_scim_off_every_path_is_a_scim_404(gateway, plane):
    plane.settings.current = settings_with(SCIMSettings(enabled=False))
    for path in ("/scim/v2/Users", "/scim/v2/ServiceProviderConfig", "/scim/v2"):
        async with gateway.get(path, headers=gateway.headers) as r:
            assert r.status == 404 and "auth.scim.enabled" in (await _error(r))["detail"]


async def test_malformed_json_is_400_invalid_syntax(gateway):
    async with gateway.post("/scim/v2/Users", data=b'{"userName": ', headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidSyntax"
    async with gateway.patch("/scim/v2/Users/x", data=b"[]", headers=gateway.headers) as r:
        assert r.status in (400, 404)


async def test_a_body_too_large_is_refused_before_it_is_read_whole(gateway):
    async with gateway.post("/scim/v2/Users", data=b"x" * (1024 * 1024 + 1), headers=gateway.headers) as r:
        assert r.status == 413
        await _error(r)


async def test_an_unknown_id_is_404_and_a_duplicate_username_is_409_uniqueness(gateway):
    for path in ("/scim/v2/Users/nobody", "/scim/v2/Groups/nothing", "/scim/v2/Schemas/urn:x", "/scim/v2/Nope"):
        async with gateway.get(path, headers=gateway.headers) as r:
            assert r.status == 404, path
            await _error(r)
    async with gateway.post("/scim/v2/Users", json=ADA, headers=gateway.headers) as r:
        assert r.status == 201
    async with gateway.post("/scim/v2/Users", json=ADA | {"userName": "ADA@corp.example"},
                            headers=gateway.headers) as r:
        assert r.status == 409 and (await _error(r))["scimType"] == "uniqueness"
    other = ADA | {"userName": "ada2"}
    async with gateway.post("/scim/v2/Users", json=other, headers=gateway.headers) as r:
        body = await _error(r)
        assert r.status == 409 and body["scimType"] == "uniqueness" and "ada@corp.example" in body["detail"]
    for name in ("Ops", "ops"):
        async with gateway.post("/scim/v2/Groups", json={"displayName": name}, headers=gateway.headers) as r:
            assert r.status == (201 if name == "Ops" else 409)


async def test_bad_filters_values_and_patches_are_400_with_their_scim_type(gateway):
    async with gateway.get("/scim/v2/Users", params={"filter": "userName eq"}, headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidFilter"
    async with gateway.get("/scim/v2/Users", params={"filter": "userName zz \"a\""}, headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidFilter"
    async with gateway.post("/scim/v2/Users", json={"userName": "nomail"}, headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidValue"
    async with gateway.post("/scim/v2/Users", json=ADA | {"active": "maybe"}, headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidValue"
    async with gateway.post("/scim/v2/Users", json=ADA, headers=gateway.headers) as r:
        ada = await r.json()
    patches = [({"Operations": [{"op": "remove"}]}, "noTarget"),
               ({"Operations": [{"op": "frobnicate", "path": "active"}]}, "invalidSyntax"),
               ({"Operations": [{"op": "replace", "path": "emails[value co \"zzz\"].value",
                                 "value": 1}]}, "noTarget"),
               ({"Operations": []}, "invalidSyntax")]
    for body, scim_type in patches:
        async with gateway.patch(f"/scim/v2/Users/{ada['id']}", json=body, headers=gateway.headers) as r:
            assert r.status == 400 and (await _error(r))["scimType"] == scim_type, body
    async with gateway.post("/scim/v2/Groups", json={"displayName": "g", "members": [{"value": "ghost"}]},
                            headers=gateway.headers) as r:
        assert r.status == 400 and (await _error(r))["scimType"] == "invalidValue"


async def test_discovery_takes_only_get_and_a_wrong_method_is_405(gateway):
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        async with gateway.request(method, "/scim/v2/Schemas", headers=gateway.headers) as r:
            assert r.status == 405
            await _error(r)
    async with gateway.put("/scim/v2/Users", json={}, headers=gateway.headers) as r:
        assert r.status == 405


async def test_with_a_token_file_only_its_token_is_taken(gateway, plane, store, tmp_path):
    made = gateway.headers["Authorization"]
    path = tmp_path / "scim-token"
    path.write_text("scim_from-the-file\n")
    path.chmod(0o600)
    plane.settings.current = settings_with(SCIMSettings(enabled=True, token_file=str(path)))

    async def answers(header: str) -> int:
        async with gateway.get("/scim/v2/Users", headers={"Authorization": header}) as r:
            return r.status

    deadline = time.monotonic() + 15
    while await answers("Bearer scim_from-the-file") != 200:
        assert time.monotonic() < deadline, "the token file's token was never taken"
        await asyncio.sleep(0.1)
    assert await answers(made) == 401


async def test_every_change_is_in_the_audit_log(gateway, store):
    async with gateway.post("/scim/v2/Users", json=ADA, headers=gateway.headers) as r:
        ada = await r.json()
    async with gateway.patch(f"/scim/v2/Users/{ada['id']}", headers=gateway.headers, json={
            "Operations": [{"op": "add", "path": "title", "value": "Countess"}]}) as r:
        assert r.status == 200
    async with gateway.post("/scim/v2/Groups", json={"displayName": "Ops", "members": [{"value": ada["id"]}]},
                            headers=gateway.headers) as r:
        group = await r.json()
    async with gateway.delete(f"/scim/v2/Groups/{group['id']}", headers=gateway.headers) as r:
        assert r.status == 204
    async with gateway.delete(f"/scim/v2/Users/{ada['id']}", headers=gateway.headers) as r:
        assert r.status == 204
    entries = await store.list_audit(limit=100)
    actions = [e.action for e in entries]
    for action in ("person.create", "person.link", "scim.user.create", "scim.user.update", "scim.group.create",
                   "scim.group.delete", "person.suspend", "scim.user.delete"):
        assert action in actions, action
    update = next(e for e in entries if e.action == "scim.user.update")
    assert update.actor == "scim" and update.after["changed"] == ["title"]
