"""People and the tenancy tree on the admin API, in process against a real store of each dialect:
each change is made by llmgw.account's services and audited as the token's holder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Sessions, check_password
from llmgw.auth import DirectoryAccounts
from llmgw.config import AuthSettings
from llmgw.control.adminapi import make_admin_app
from llmgw.control.token import AdminToken
from llmgw.store import Store

SECRET = "admin-token-for-tests"
PASSWORD = "correct horse battery"
CLAIM = {"X-Llmgw-Actor": "ada", "X-Llmgw-Via": "cli"}


class Keys:
    def invalidate(self, key_id: str) -> None: ...
    def clear(self) -> None: ...


@dataclass
class Plane:
    """What the admin API's people and tree routes read of a control plane."""

    store: Store
    accounts: Accounts
    admin_token: AdminToken = field(default_factory=lambda: AdminToken(SECRET, "ops"))
    keys: Keys = field(default_factory=Keys)

    @property
    def directory(self) -> DirectoryAccounts:
        return DirectoryAccounts(self.store, self.accounts.people, self.accounts.audit,
                                 break_glass=lambda: "admin@localhost")


class Api:
    def __init__(self, client: TestClient):
        self.client = client

    async def call(self, method: str, path: str, body: Any = None, *, headers: dict | None = None,
                   token: str = SECRET) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body, headers={
            "Authorization": f"Bearer {token}", **CLAIM, **(headers or {})})
        return response.status, await response.json()


@pytest.fixture
async def api(store):
    client = TestClient(TestServer(make_admin_app(Plane(store, Accounts(store)))))  # type: ignore[arg-type]
    await client.start_server()
    yield Api(client)
    await client.close()


async def audit_of(api: Api, target: str) -> list[dict]:
    status, entries = await api.call("GET", f"/api/v1/audit?target={target}")
    assert status == 200
    return entries


async def test_a_person_added_without_a_password_gets_one_in_the_answer_once_and_nowhere_else(api, store):
    status, added = await api.call("POST", "/api/v1/people", {"email": "bea@example.com", "name": "Bea"})

    assert status == 201
    password = added["password"]
    assert len(password) == 20 and added["must_change_password"] is True and added["role"] == "member"
    stored = await store.person_by_email("bea@example.com")
    assert check_password(password, stored.password_hash)
    _, shown = await api.call("GET", "/api/v1/people/bea@example.com")
    _, everyone = await api.call("GET", "/api/v1/people")
    [entry] = await audit_of(api, f"person:{added['id']}")
    assert (entry["action"], entry["via"]) == ("person.create", "cli")
    assert entry["actor"] == "ops (claimed: ada via llmgw ctl)"
    for elsewhere in (shown, everyone, entry):
        assert password not in str(elsewhere) and "password_hash" not in str(elsewhere)


async def test_a_person_added_with_a_password_and_places_belongs_there_and_gets_no_password_back(api, store):
    await store.ensure_project("Acme", "Research", "search")
    status, added = await api.call("POST", "/api/v1/people", {
        "email": "cy@example.com", "name": "Cy", "role": "operator", "password": PASSWORD,
        "member_of": ["team:Acme/Research"]})

    assert status == 201 and "password" not in added
    assert added["member_of"] == ["team:Acme/Research"] and added["role"] == "operator"
    _, by_id = await api.call("GET", f"/api/v1/people/{added['id']}")
    assert by_id["email"] == "cy@example.com" and by_id["must_change_password"] is False


@pytest.mark.parametrize(("body", "status", "sentence"), [
    ({"email": "d@example.com", "name": "D", "role": "owner"}, 400,
     '"owner" is not a role; roles are admin, operator, member'),
    ({"email": "d@example.com", "name": "D", "member_of": ["team:Acme/Nowhere"]}, 404,
     "there is no team Acme/Nowhere; make it first"),
    ({"email": "d@example.com", "name": "D", "password": "short"}, 400, "a password needs at least 10 characters"),
    ({"email": "d@example.com"}, 400, '"name" is required'),
    ({"email": "not an address", "name": "D"}, 400, '"not an address" is not an e-mail address'),
    ({"email": "d@example.com", "name": "D", "member_of": "org:Acme"}, 400, '"member_of" has the wrong type'),
])
async def test_a_person_the_api_cannot_add_is_refused_with_a_sentence(api, body, status, sentence):
    got, answer = await api.call("POST", "/api/v1/people", body)

    assert got == status
    assert answer["error"]["message"].startswith(sentence)


async def test_an_e_mail_already_taken_and_an_unknown_person_are_refused_with_what_to_do(api):
    await api.call("POST", "/api/v1/people", {"email": "eve@example.com", "name": "Eve"})
    status, answer = await api.call("POST", "/api/v1/people", {"email": "EVE@example.com", "name": "Eve 2"})
    assert (status, answer["error"]["code"]) == (409, "conflict")
    assert "already belongs to someone here" in answer["error"]["message"]

    status, answer = await api.call("POST", "/api/v1/people/nobody@example.com/role", {"role": "admin"})
    assert status == 404
    assert answer["error"]["message"] == "no person nobody@example.com is known here; llmgw people list shows them"


async def test_without_the_admin_token_nothing_about_people_is_read_or_changed(api):
    for method, path in (("GET", "/api/v1/people"), ("POST", "/api/v1/people"), ("GET", "/api/v1/tree")):
        status, answer = await api.call(method, path, {}, token="wrong")
        assert (status, answer["error"]["code"]) == (401, "unauthorized")


async def test_a_role_change_is_audited_and_the_last_admin_cannot_stop_being_one(api):
    _, root = await api.call("POST", "/api/v1/people", {"email": "root@example.com", "name": "Root",
                                                         "role": "admin"})
    _, fay = await api.call("POST", "/api/v1/people", {"email": "fay@example.com", "name": "Fay"})

    status, answer = await api.call("POST", "/api/v1/people/root@example.com/role", {"role": "member"})
    assert status == 409
    assert answer["error"]["message"] == ("root@example.com is the last active admin; "
                                          "make someone else an admin first")
    status, promoted = await api.call("POST", "/api/v1/people/fay@example.com/role", {"role": "admin"})
    assert (status, promoted["role"]) == (200, "admin")
    [entry] = [e for e in await audit_of(api, f"person:{fay['id']}") if e["action"] == "person.role"]
    assert (entry["before"]["role"], entry["after"]["role"]) == ("member", "admin")
    assert entry["actor"] == "ops (claimed: ada via llmgw ctl)"


async def test_a_suspended_person_loses_every_session_and_cannot_sign_in_until_it_is_lifted(api, store):
    await api.call("POST", "/api/v1/people", {"email": "gus@example.com", "name": "Gus", "password": PASSWORD})
    sessions = Sessions(store, lambda: AuthSettings())
    signed_in = await sessions.sign_in("gus@example.com", PASSWORD, address="192.0.2.1")
    assert await sessions.current(signed_in.token) is not None

    status, suspended = await api.call("POST", "/api/v1/people/gus@example.com/suspend", {})

    assert (status, suspended["state"]) == (200, "suspended")
    assert await sessions.current(signed_in.token) is None
    with pytest.raises(Exception, match="do not match an account here"):  # as a wrong password: no hint
        await sessions.sign_in("gus@example.com", PASSWORD, address="192.0.2.1")
    status, lifted = await api.call("POST", "/api/v1/people/gus@example.com/suspend", {"lift": True})
    assert (status, lifted["state"]) == (200, "active")
    assert await sessions.sign_in("gus@example.com", PASSWORD, address="192.0.2.1")
    actions = [e["action"] for e in await audit_of(api, f"person:{suspended['id']}")]
    assert {"person.suspend", "person.unsuspend"} <= set(actions)


async def test_a_reset_password_is_in_the_answer_only_and_the_old_one_stops_working(api, store):
    _, hal = await api.call("POST", "/api/v1/people", {"email": "hal@example.com", "name": "Hal",
                                                        "password": PASSWORD})
    sessions = Sessions(store, lambda: AuthSettings())
    old_session = await sessions.sign_in("hal@example.com", PASSWORD, address="192.0.2.2")

    status, reset = await api.call("POST", "/api/v1/people/hal@example.com/reset-password")

    assert status == 200 and reset["must_change_password"] is True
    new = reset["password"]
    assert await sessions.current(old_session.token) is None
    with pytest.raises(Exception, match="do not match"):
        await sessions.sign_in("hal@example.com", PASSWORD, address="192.0.2.2")
    signed_in = await sessions.sign_in("hal@example.com", new, address="192.0.2.2")
    assert signed_in.person.must_change_password is True
    entries = await audit_of(api, f"person:{hal['id']}")
    assert "person.reset_password" in [e["action"] for e in entries]
    assert new not in str(entries)
    _, shown = await api.call("GET", "/api/v1/people/hal@example.com")
    assert new not in str(shown)


async def test_joining_and_leaving_a_place_changes_what_the_person_belongs_to(api, store):
    await store.ensure_project("Acme", "Research", "search")
    _, ivy = await api.call("POST", "/api/v1/people", {"email": "ivy@example.com", "name": "Ivy"})

    status, joined = await api.call("POST", "/api/v1/people/ivy@example.com/memberships",
                                    {"place": "project:Acme/Research/search"})
    assert (status, joined["member_of"]) == (200, ["project:Acme/Research/search"])
    status, left = await api.call("POST", "/api/v1/people/ivy@example.com/memberships",
                                  {"place": "project:Acme/Research/search", "remove": True})
    assert (status, left["member_of"]) == (200, [])
    status, answer = await api.call("POST", "/api/v1/people/ivy@example.com/memberships", {"place": "Acme"})
    assert status == 400 and answer["error"]["message"].startswith('"Acme" is not a place')
    actions = [e["action"] for e in await audit_of(api, f"person:{ivy['id']}")]
    assert {"person.join", "person.leave"} <= set(actions)


async def test_the_tree_grows_a_place_at_a_time_and_shows_each_levels_own_limits(api):
    for kind, path in (("org", "Acme"), ("team", "Acme/Research"), ("project", "Acme/Research/search")):
        status, made = await api.call("POST", "/api/v1/tree", {"kind": kind, "path": path})
        assert status == 201 and (made["kind"], made["path"]) == (kind, path)
    status, _ = await api.call("PUT", "/api/v1/limits", {"scope": "team", "id": "Acme/Research",
                                                         "limits": {"budget": "25.00"}})
    assert status == 200

    status, tree = await api.call("GET", "/api/v1/tree")

    assert status == 200
    [org] = tree["orgs"]
    [team] = org["teams"]
    [project] = team["projects"]
    assert (org["name"], org["limits"]) == ("Acme", None)
    assert (team["path"], team["limits"]["budget"], team["limits"]["period"]) == ("Acme/Research", "25.00", "month")
    assert (project["path"], project["limits"]) == ("Acme/Research/search", None)
    [made] = [e for e in await audit_of(api, f"team:{team['id']}") if e["action"] == "team.create"]
    assert made["actor"] == "ops (claimed: ada via llmgw ctl)"
    assert made["after"] == {"kind": "team", "id": team["id"], "path": "Acme/Research"}


@pytest.mark.parametrize(("body", "status", "sentence"), [
    ({"kind": "team", "path": "Nowhere/dev"}, 404,
     "there is no org Nowhere; make it first with llmgw ctl tree add org Nowhere"),
    ({"kind": "project", "path": "Acme/dev"}, 400, '"Acme/dev" is not a project path: write ORG/TEAM/PROJECT'),
    ({"kind": "org", "path": "Acme"}, 409, "org Acme exists already"),
    ({"kind": "folder", "path": "Acme"}, 400, '"folder" is not a kind of place; write org, team or project'),
    ({"kind": "org", "path": "-bad"}, 400, '"-bad" cannot name a org'),
])
async def test_a_place_the_tree_cannot_take_is_refused_with_a_sentence(api, body, status, sentence):
    await api.call("POST", "/api/v1/tree", {"kind": "org", "path": "Acme"})

    got, answer = await api.call("POST", "/api/v1/tree", body)

    assert got == status
    assert answer["error"]["message"].startswith(sentence)


def test_the_clis_roles_are_the_account_packages():
    from llmgw.account import ROLES
    from llmgw.cli.people import ROLES as CLI_ROLES

    assert CLI_ROLES == ROLES


async def test_a_directory_identity_is_linked_on_purpose_and_never_to_the_break_glass_account(api):
    await api.call("POST", "/api/v1/people", {"email": "admin@localhost", "name": "Admin", "role": "admin",
                                              "password": PASSWORD})
    await api.call("POST", "/api/v1/people", {"email": "ada@example.com", "name": "Ada", "password": PASSWORD})

    status, linked = await api.call("POST", "/api/v1/people/ada@example.com/link",
                                    {"source": "oidc", "subject": "https://sso.example.com#ada"})
    assert status == 200
    assert [(i["source"], i["subject"]) for i in linked["identities"]] == [("oidc", "https://sso.example.com#ada")]
    status, taken = await api.call("POST", "/api/v1/people/admin@localhost/link",
                                   {"source": "oidc", "subject": "https://sso.example.com#mallory"})
    assert status == 409 and "break-glass" in taken["error"]["message"]
    status, twice = await api.call("POST", "/api/v1/people/admin@localhost/link",
                                   {"source": "ldap", "subject": ""})
    assert status == 400
    [entry] = [e for e in await audit_of(api, f"person:{linked['id']}") if e["action"] == "person.link"]
    assert entry["actor"].startswith("ops") and entry["after"] == {"source": "oidc", "subject": "https://sso.example.com#ada"}
