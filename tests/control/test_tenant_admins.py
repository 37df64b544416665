"""Tenant administrators on the admin API (issue 31): Acme's administrator, with a token of her own, does her
org's work and tries every route on Beta and on the cluster, and is refused with nothing learned.

In process against a real store of each dialect, through the same routes `llmgw people|keys|ctl` call.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts
from llmgw.config.notify import NotifySettings
from llmgw.control.adminapi import TENANT_ROUTES, make_admin_app
from llmgw.control.settings import ClusterSettingsWatcher
from llmgw.events import Event
from llmgw.notify import Sender, Webhooks, wants
from llmgw.store import Usage
from tests.control.test_adminapi_people import Api, Plane

# Beta's names and ids, which nothing Acme's administrator reads may hold.
BETA_WORDS = ("Beta", "beta.example", "bob@", "key-of-beta")


class Tenancy:
    def __init__(self, api: Api, plane: Plane):
        self.api, self.plane = api, plane
        self.ids: dict[str, str] = {}
        self.acme_token = self.team_token = ""

    async def as_cluster(self, method: str, path: str, body=None):
        status, answer = await self.api.call(method, path, body)
        assert status < 300, (path, answer)
        return answer

    async def as_acme(self, method: str, path: str, body=None) -> tuple[int, object]:
        return await self.api.call(method, path, body, token=self.acme_token)

    async def as_team(self, method: str, path: str, body=None) -> tuple[int, object]:
        return await self.api.call(method, path, body, token=self.team_token)


@pytest.fixture
async def tenancy(store, tmp_path):
    plane = Plane(store, Accounts(store))
    plane.settings = ClusterSettingsWatcher(store)  # type: ignore[attr-defined]  # keys read auth.max_key_ttl
    sender = Sender(store, NotifySettings, str(tmp_path), leading=lambda: True)
    plane.notify = SimpleNamespace(webhooks=Webhooks(store, sender))  # type: ignore[attr-defined]
    client = TestClient(TestServer(make_admin_app(plane)))  # type: ignore[arg-type]
    await client.start_server()
    t = Tenancy(Api(client), plane)
    for kind, path in (("org", "Acme"), ("team", "Acme/ml"), ("project", "Acme/ml/train"), ("team", "Acme/web"),
                       ("project", "Acme/web/site"), ("org", "Beta"), ("team", "Beta/ops"),
                       ("project", "Beta/ops/pager")):
        made = await t.as_cluster("POST", "/api/v1/tree", {"kind": kind, "path": path})
        t.ids[path] = made["id"]
    ada = await t.as_cluster("POST", "/api/v1/people", {"email": "ada@acme.example", "name": "Ada",
                                                        "member_of": ["org:Acme"]})
    await t.as_cluster("POST", "/api/v1/people", {"email": "bob@beta.example", "name": "Bob",
                                                  "member_of": ["team:Beta/ops"]})
    await t.as_cluster("POST", "/api/v1/people", {"email": "cy@acme.example", "name": "Cy",
                                                  "member_of": ["team:Acme/ml"]})
    await t.as_cluster("POST", "/api/v1/people/ada@acme.example/administer", {"place": "org:Acme"})
    t.ids["ada"] = ada["id"]
    root = await t.as_cluster("POST", "/api/v1/people", {"email": "root@example.com", "name": "Root", "role": "admin"})
    t.ids["root"] = root["id"]
    t.acme_token = (await t.as_cluster("POST", "/api/v1/people/ada@acme.example/tokens"))["token"]
    beta_key = await t.as_cluster("POST", "/api/v1/keys", {"name": "key-of-beta", "project": "Beta/ops/pager"})
    t.ids["beta_key"] = beta_key["id"]
    await t.as_cluster("PUT", "/api/v1/limits", {"scope": "org", "id": "Acme", "limits": {"budget": "100"}})
    yield t
    await client.close()


def _says_nothing_of_beta(answer: object) -> None:
    text = json.dumps(answer)
    for word in BETA_WORDS:
        assert word not in text, text


async def test_an_orgs_administrator_adds_a_member_makes_a_key_and_sets_a_budget_inside_the_orgs(tenancy):
    t = tenancy
    status, dee = await t.as_acme("POST", "/api/v1/people", {"email": "dee@acme.example", "name": "Dee",
                                                            "member_of": ["team:Acme/web"]})
    assert status == 201 and dee["member_of"] == ["team:Acme/web"] and dee["password"]
    status, key = await t.as_acme("POST", "/api/v1/keys", {"name": "site", "project": "Acme/web/site",
                                                          "person": "dee@acme.example"})
    assert status == 201 and key["key"].startswith("sk-llmgw-")
    status, limits = await t.as_acme("PUT", "/api/v1/limits",
                                     {"scope": "team", "id": "Acme/web", "limits": {"budget": "40"}})
    assert status == 200 and limits["limits"]["budget"] == "40.00"
    status, refused = await t.as_acme("PUT", "/api/v1/limits",
                                      {"scope": "team", "id": "Acme/ml", "limits": {"budget": "400"}})
    assert status == 400 and "100.00" in refused["error"]["message"]  # inside what the org allows
    status, suspended = await t.as_acme("POST", "/api/v1/people/dee@acme.example/suspend", {})
    assert status == 200 and suspended["state"] == "suspended"
    status, entries = await t.as_acme("GET", "/api/v1/audit")
    assert status == 200
    assert {"person.create", "key.create", "limits.set", "person.suspend"} <= {e["action"] for e in entries}
    assert {e["actor"] for e in entries if e["action"] == "key.create"} >= {"ada@acme.example (claimed: ada via "
                                                                          "llmgw ctl)"}
    _says_nothing_of_beta(entries)


async def test_acmes_administrator_reads_only_acme_in_every_listing(tenancy):
    t = tenancy
    for path in ("/api/v1/people", "/api/v1/keys", "/api/v1/tree", "/api/v1/audit", "/api/v1/usage",
                 "/api/v1/usage?by=project", "/api/v1/usage?by=model"):
        status, answer = await t.as_acme("GET", path)
        assert status == 200, (path, answer)
        _says_nothing_of_beta(answer)
    _, tree = await t.as_acme("GET", "/api/v1/tree")
    assert [o["name"] for o in tree["orgs"]] == ["Acme"]
    _, people = await t.as_acme("GET", "/api/v1/people")
    assert sorted(p["email"] for p in people) == ["ada@acme.example", "cy@acme.example"]


async def test_usage_read_by_a_tenant_sums_only_its_own_projects(tenancy, store):
    t = tenancy
    now = time.time()
    rows = [Usage(id=f"u{i}", at=now - 10, key_id=None, project_id=t.ids[project], model="m", status=200,
                  prompt_tokens=10, completion_tokens=5, cost_micros=1_000_000)
            for i, project in enumerate(("Acme/ml/train", "Acme/web/site", "Beta/ops/pager", "Beta/ops/pager"))]
    await store.add_usage(rows)
    _, cluster = await t.api.call("GET", "/api/v1/usage?by=model")
    _, acme = await t.as_acme("GET", "/api/v1/usage?by=model")
    assert cluster["total"]["requests"] == 4 and acme["total"]["requests"] == 2
    assert acme["total"]["cost"] == "2.00"


async def test_every_route_on_beta_is_answered_as_if_beta_were_not_there(tenancy):
    t = tenancy
    beta_key, beta_team = t.ids["beta_key"], t.ids["Beta/ops"]
    # Each try on Beta beside the same try on Zeta, which does not exist: the answers must be the same,
    # names aside, so a refusal tells Acme's administrator nothing of Beta, not even that it is there.
    ghosts = {"bob@beta.example": "zed@zeta.example", beta_key: "key_0123456789abcdef",
              beta_team: "team_0123456789abcdef", "Beta": "Zeta"}
    tries = [
        ("GET", "/api/v1/people/bob@beta.example", None),
        ("POST", "/api/v1/people/bob@beta.example/suspend", {}),
        ("POST", "/api/v1/people/bob@beta.example/reset-password", {}),
        ("POST", "/api/v1/people/bob@beta.example/memberships", {"place": "team:Acme/ml"}),
        ("POST", "/api/v1/people/cy@acme.example/memberships", {"place": "team:Beta/ops"}),
        ("POST", "/api/v1/people/bob@beta.example/administer", {"place": "team:Acme/ml"}),
        ("POST", "/api/v1/people", {"email": "eve@acme.example", "name": "Eve", "member_of": ["team:Beta/ops"]}),
        ("POST", "/api/v1/keys", {"name": "x", "project": "Acme/web/site", "person": "bob@beta.example"}),
        ("GET", f"/api/v1/keys/{beta_key}", None),
        ("POST", f"/api/v1/keys/{beta_key}/revoke", {}),
        ("GET", "/api/v1/keys?project=Beta/ops/pager", None),
        ("POST", "/api/v1/keys", {"name": "x", "project": "Beta/ops/pager"}),
        ("POST", "/api/v1/keys", {"name": "x", "project": "Beta/ops/pagr"}),
        ("POST", "/api/v1/keys", {"name": "x", "project": "Beta/ops/new", "create": True}),
        ("GET", f"/api/v1/limits?scope=team&id={beta_team}", None),
        ("GET", "/api/v1/limits?scope=org&id=Beta", None),
        ("PUT", "/api/v1/limits", {"scope": "team", "id": "Beta/ops", "limits": {"rpm": 1}}),
        ("PUT", "/api/v1/limits", {"scope": "key", "id": beta_key, "limits": {"rpm": 1}}),
        ("POST", "/api/v1/tree", {"kind": "project", "path": "Beta/ops/mine"}),
        ("POST", "/api/v1/tree", {"kind": "team", "path": "Beta/mine"}),
    ]

    def ghost(text: str) -> str:
        for real, none in ghosts.items():
            text = text.replace(real, none)
        return text

    for method, path, body in tries:
        status, answer = await t.as_acme(method, path, body)
        assert status in (403, 404), (method, path, status, answer)
        ghost_body = None if body is None else json.loads(ghost(json.dumps(body)))
        ghost_status, ghost_answer = await t.as_acme(method, ghost(path), ghost_body)
        assert (status, ghost(json.dumps(answer))) == (ghost_status, json.dumps(ghost_answer)), (method, path)
    for method, path, body in [("PUT", "/api/v1/limits", {"scope": "org", "id": "Acme", "limits": {"budget": "1e3"}}),
                               ("POST", "/api/v1/tree", {"kind": "org", "path": "Gamma"}),
                               ("POST", "/api/v1/people/cy@acme.example/role", {"role": "admin"})]:
        status, answer = await t.as_acme(method, path, body)
        assert status == 403, (method, path, answer)
    # Nothing changed: Bob is active, Beta's key works, no place was made.
    bob = await t.as_cluster("GET", "/api/v1/people/bob@beta.example")
    key = await t.as_cluster("GET", f"/api/v1/keys/{beta_key}")
    tree = await t.as_cluster("GET", "/api/v1/tree")
    assert bob["state"] == "active" and bob["member_of"] == ["team:Beta/ops"] and key["state"] == "active"
    assert sorted(o["name"] for o in tree["orgs"]) == ["Acme", "Beta"]


async def test_every_route_not_listed_for_tenants_is_refused_before_its_handler(tenancy):
    t = tenancy
    app = t.api.client.server.app
    tried = 0
    for route in app.router.routes():
        method, pattern = route.method, route.resource.canonical if route.resource else ""
        if method == "HEAD" or (method, pattern) in TENANT_ROUTES:
            continue
        path = pattern.replace("{ident}", "ada@acme.example").replace("{", "").replace("}", "")
        status, answer = await t.as_acme(method, path, {})
        tried += 1
        assert status == 403, (method, pattern, answer)
        assert "cluster administrator" in answer["error"]["message"]
        _says_nothing_of_beta(answer)
    assert tried > 40  # the cluster's own routes: status, config, models, nodes, sign-in, upgrades, …


async def test_a_path_the_admin_api_does_not_have_is_answered_with_a_tenants_token_as_with_the_admin_token(tenancy):
    t = tenancy
    for method, path in (("GET", "/api/v1/nowhere"), ("DELETE", "/api/v1/people")):
        status, answer = await t.as_acme(method, path, None)
        assert (status, answer) == await t.api.call(method, path, None), (method, path)
        assert status in (404, 405) and answer["error"]["message"] == f"there is no {method} {path} in the admin API"


async def test_a_teams_administrator_sets_its_projects_limits_but_not_the_teams_own(tenancy):
    t = tenancy
    await t.as_cluster("POST", "/api/v1/people/cy@acme.example/administer", {"place": "team:Acme/ml"})
    t.team_token = (await t.as_cluster("POST", "/api/v1/people/cy@acme.example/tokens"))["token"]
    status, _ = await t.as_team("PUT", "/api/v1/limits",
                                {"scope": "project", "id": "Acme/ml/train", "limits": {"rpm": 30}})
    assert status == 200
    status, refused = await t.as_team("PUT", "/api/v1/limits", {"scope": "team", "id": "Acme/ml",
                                                                "limits": {"rpm": 3000}})
    assert status == 403 and "level above" in refused["error"]["message"]
    status, _ = await t.as_team("GET", "/api/v1/people/ada@acme.example")
    assert status == 404  # Ada is the org's: above the team
    _, tree = await t.as_team("GET", "/api/v1/tree")
    assert [(o["name"], [team["name"] for team in o["teams"]]) for o in tree["orgs"]] == [("Acme", ["ml"])]
    status, refused = await t.as_team("POST", "/api/v1/tree", {"kind": "team", "path": "Acme/data"})
    assert status == 403 and "org's administrator" in refused["error"]["message"]


async def test_a_grant_taken_away_or_a_suspension_refuses_the_token_at_the_next_call(tenancy):
    t = tenancy
    assert (await t.as_acme("GET", "/api/v1/people"))[0] == 200
    await t.as_cluster("POST", "/api/v1/people/ada@acme.example/administer", {"place": "org:Acme", "remove": True})
    status, refused = await t.as_acme("GET", "/api/v1/people")
    assert status == 401 and "administers nothing" in refused["error"]["message"]
    ada = await t.as_cluster("GET", "/api/v1/people/ada@acme.example")
    assert ada["member_of"] == ["org:Acme"] and ada["administers"] == []


async def test_a_revoked_token_is_refused_and_a_token_is_kept_only_as_its_hash(tenancy, store):
    t = tenancy
    [listed] = await t.as_cluster("GET", "/api/v1/people/ada@acme.example/tokens")
    assert t.acme_token not in json.dumps(listed) and listed["prefix"] == t.acme_token[:16]
    [kept] = await store.person_tokens(t.ids["ada"])
    assert t.acme_token.encode() not in kept.digest
    await t.as_cluster("POST", f"/api/v1/people/ada@acme.example/tokens/{listed['id']}/revoke")
    status, _ = await t.as_acme("GET", "/api/v1/people")
    assert status == 401


async def test_a_token_for_someone_who_administers_nothing_is_not_made(tenancy):
    t = tenancy
    status, refused = await t.api.call("POST", "/api/v1/people/bob@beta.example/tokens", {})
    assert status == 409 and "administers nothing" in refused["error"]["message"]


async def test_a_token_never_carries_a_cluster_administrators_power(tenancy):
    t = tenancy
    status, refused = await t.api.call("POST", f"/api/v1/people/{t.ids['root']}/tokens", {})
    assert status == 409 and "uses the admin token" in refused["error"]["message"]
    # A tenant made an admin since: their token is refused, not grown into the admin token.
    await t.as_cluster("POST", "/api/v1/people/ada@acme.example/role", {"role": "admin"})
    status, refused = await t.as_acme("GET", "/api/v1/status")
    assert status == 401
    status, _ = await t.as_acme("GET", "/api/v1/people")
    assert status == 401


async def test_an_orgs_administrator_adds_webhooks_for_a_place_of_theirs_and_sees_no_other(tenancy, store):
    t = tenancy
    hook = "https://hooks.example.com/acme-ml"
    status, added = await t.as_acme("POST", "/api/v1/webhooks", {"url": hook, "place": "team:Acme/ml"})
    assert status == 201 and added["webhook"]["place"] == f"team:{t.ids['Acme/ml']}"
    status, refused = await t.as_acme("POST", "/api/v1/webhooks", {"url": hook})
    assert status == 400 and "--place" in refused["error"]["message"]
    status, refused = await t.as_acme("POST", "/api/v1/webhooks", {"url": "http://127.0.0.1:9/x", "place": "org:Acme",
                                                                   "allow_private": True})
    assert status == 403
    # Beta's place is not there for Acme's administrator, as Zeta is not.
    beta = await t.as_acme("POST", "/api/v1/webhooks", {"url": hook, "place": "team:Beta/ops"})
    zeta = await t.as_acme("POST", "/api/v1/webhooks", {"url": hook, "place": "team:Zeta/ops"})
    assert (beta[0], beta[1]["error"]["message"].replace("Beta", "Zeta")) == (zeta[0], zeta[1]["error"]["message"])
    cluster_hook = (await t.as_cluster("POST", "/api/v1/webhooks", {"url": "https://hooks.example.com/ops"}))
    beta_hook = (await t.as_cluster("POST", "/api/v1/webhooks", {"url": "https://hooks.example.com/beta",
                                                                  "place": "team:Beta/ops"}))
    _, listed = await t.as_acme("GET", "/api/v1/webhooks")
    assert [h["url"] for h in listed["webhooks"]] == [hook]
    for other in (cluster_hook, beta_hook):
        status, _ = await t.as_acme("DELETE", f"/api/v1/webhooks/{other['webhook']['id']}")
        assert status == 404
    status, refused = await t.as_acme("GET", f"/api/v1/webhooks/deliveries?webhook={beta_hook['webhook']['id']}")
    assert status == 404
    assert len((await t.as_cluster("GET", "/api/v1/webhooks"))["webhooks"]) == 3


def test_a_places_webhook_is_sent_its_places_events_and_none_of_the_clusters_or_the_level_above():
    from llmgw.store import Webhook

    team_hook, org_hook, cluster_hook = (Webhook("wh_t", "https://t", place="team:team_ml"),
                                         Webhook("wh_o", "https://o", place="org:org_acme"), Webhook("wh_c", "https://c"))
    key_revoked = Event("key_revoked", "key_1", 0.0, {"org_id": "org_acme", "team_id": "team_ml"})
    elsewhere = Event("key_revoked", "key_2", 0.0, {"org_id": "org_acme", "team_id": "team_web"})
    org_budget = Event("budget_80", "org:org_acme", 0.0, {"org_id": "org_acme"})
    node_lost = Event("node_lost", "node_1", 0.0, {"node": "gpu-1"})
    sent = {e.subject: [h.id for h in (team_hook, org_hook, cluster_hook) if wants(h, e)]
            for e in (key_revoked, elsewhere, org_budget, node_lost)}
    assert sent == {"key_1": ["wh_t", "wh_o", "wh_c"], "key_2": ["wh_o", "wh_c"], "org:org_acme": ["wh_o", "wh_c"],
                    "node_1": ["wh_c"]}
