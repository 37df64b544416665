"""Sign-in's setup on the admin API, in process against a real store of each dialect: secrets kept sealed
and named by reference only, a block tried before it is kept, the SCIM token shown once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts
from llmgw.config import ClusterSettings
from llmgw.config.server import ServerConfig
from llmgw.control.adminapi import make_admin_app
from llmgw.control.settings import ClusterSettingsWatcher, seed_settings
from llmgw.control.token import AdminToken
from llmgw.store import Store
from llmgw.trust import ensure_master_key
from llmgw.trust.masterkey import FILE_NAME
from tests.support.pgcluster import free_port

SECRET = "admin-token-for-tests"
BIND_PASSWORD = "Bind-pa55word-never-shown"


@dataclass
class Plane:
    """What the admin API's sign-in routes read of a control plane."""

    store: Store
    settings: ClusterSettingsWatcher
    cfg: ServerConfig
    accounts: Accounts
    admin_token: AdminToken = field(default_factory=lambda: AdminToken(SECRET, "ops"))
    listen_addresses: dict[str, str] = field(default_factory=lambda: {"client": "127.0.0.1:8080"})


class Api:
    def __init__(self, client: TestClient):
        self.client = client

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body, headers={"Authorization": f"Bearer {SECRET}"})
        return response.status, await response.json()


@pytest.fixture
async def api(store, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    ensure_master_key(str(data / FILE_NAME))
    await seed_settings(store, ClusterSettings(), "server.yaml", "system")
    watcher = ClusterSettingsWatcher(store)
    await watcher.refresh()
    plane = Plane(store, watcher, ServerConfig(data_dir=str(data), store=f"sqlite:{data / 'x.db'}"), Accounts(store))
    client = TestClient(TestServer(make_admin_app(plane)))  # type: ignore[arg-type]
    await client.start_server()
    yield Api(client)
    await client.close()


def closed_port() -> int:
    """A loopback port nothing listens on, leased so no other test starts a listener there."""
    return free_port()


def ldap_block(port: int, **more: Any) -> dict[str, Any]:
    return {"urls": [f"ldaps://127.0.0.1:{port}"], "base_dn": "ou=people,dc=corp,dc=example",
            "bind_dn": "cn=llmgw,dc=corp,dc=example", "bind_password_file": "store:auth/ldap-bind",
            "timeout": "2s", **more}


async def test_a_secret_kept_through_the_api_is_named_by_its_reference_and_its_value_is_shown_nowhere(api, store):
    status, kept = await api.call("PUT", "/api/v1/auth/secrets/ldap-bind", {"value": BIND_PASSWORD})

    assert (status, kept) == (200, {"ref": "store:auth/ldap-bind"})
    assert BIND_PASSWORD.encode() not in await store.sealed_secret("auth/ldap-bind")
    _, shown = await api.call("GET", "/api/v1/auth")
    _, audit = await api.call("GET", "/api/v1/audit?target=auth:ldap-bind")
    assert shown["secrets"] == ["store:auth/ldap-bind"]
    assert [e["action"] for e in audit] == ["auth.secret.set"]
    assert BIND_PASSWORD not in str(shown) + str(audit)


async def test_a_secret_with_a_name_that_could_reach_elsewhere_is_refused_with_a_sentence(api):
    status, refused = await api.call("PUT", "/api/v1/auth/secrets/..%2Fmaster", {"value": "x"})

    assert status == 400 and "is not a secret's name" in refused["error"]["message"]


async def test_a_block_breaking_a_rule_is_refused_naming_the_key_and_nothing_is_tried(api):
    status, refused = await api.call("POST", "/api/v1/auth/test/ldap", {
        "settings": {"urls": ["ldap://127.0.0.1:389"], "base_dn": "dc=corp,dc=example"}})

    assert status == 400
    assert refused["error"]["message"].startswith("auth.ldap.urls[0]: ")
    assert "plaintext LDAP" in refused["error"]["message"]


async def test_a_directory_that_does_not_answer_fails_its_trial_and_the_block_is_not_kept(api):
    await api.call("PUT", "/api/v1/auth/secrets/ldap-bind", {"value": BIND_PASSWORD})
    _, before = await api.call("GET", "/api/v1/config")

    status, answer = await api.call("PUT", "/api/v1/auth/ldap", {"settings": ldap_block(closed_port())})

    assert status == 422 and answer["kept"] is False and answer["error"]["code"] == "trial_failed"
    failed = [s for s in answer["trial"]["steps"] if not s["ok"]]
    assert failed and "127.0.0.1" in failed[0]["detail"]
    _, after = await api.call("GET", "/api/v1/config")
    assert after["version"] == before["version"] and not after["value"]["auth"]["ldap"]["urls"]


async def test_an_identity_provider_that_does_not_answer_fails_its_trial_with_one_sentence(api):
    status, trial = await api.call("POST", "/api/v1/auth/test/oidc", {
        "settings": {"issuer": f"http://127.0.0.1:{closed_port()}", "client_id": "llmgw"}})

    assert status == 200 and trial["ok"] is False
    [failed] = [s for s in trial["steps"] if not s["ok"]]
    assert "127.0.0.1" in failed["detail"] and "Traceback" not in failed["detail"]


async def test_trying_a_kind_that_does_not_exist_names_the_ones_that_do(api):
    status, refused = await api.call("POST", "/api/v1/auth/test/kerberos", {})

    assert status == 404 and "oidc, ldap" in refused["error"]["message"]


async def test_a_secret_the_settings_name_cannot_be_removed_until_they_stop_naming_it(api, store):
    await api.call("PUT", "/api/v1/auth/secrets/scim-token", {"value": "scim_" + "t" * 40})
    status, _ = await api.call("POST", "/api/v1/config", {"set": {"auth.scim.token_file": "store:auth/scim-token"}})
    assert status == 200

    status, refused = await api.call("DELETE", "/api/v1/auth/secrets/scim-token")

    assert status == 409 and "auth.scim.token_file" in refused["error"]["message"]
    assert await store.sealed_secret("auth/scim-token") is not None


async def test_a_scim_token_is_shown_once_and_the_store_keeps_only_its_digest(api, store):
    status, made = await api.call("POST", "/api/v1/auth/scim-token")

    assert status == 201 and len(made["token"]) >= 32
    _, shown = await api.call("GET", "/api/v1/auth")
    _, audit = await api.call("GET", "/api/v1/audit?target=auth:scim")
    assert shown["scim"]["token"] == "made" and shown["scim"]["token_made_at"] is not None
    assert made["token"] not in str(shown) + str(audit)
    names = await store.list_sealed_secrets("")
    for name in names:
        assert made["token"].encode() not in await store.sealed_secret(name)


async def test_asking_for_a_sync_without_a_directory_says_there_is_none(api):
    status, refused = await api.call("POST", "/api/v1/auth/ldap/sync")

    assert status == 409 and "auth.ldap is not set up" in refused["error"]["message"]
