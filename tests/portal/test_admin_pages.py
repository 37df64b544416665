"""The admin pages for people, the tree, keys, the audit log and the settings.

In process: the portal mounted on an aiohttp app over a real store (both
dialects), with the real settings watcher, key cache and services behind it,
and a browser-like client per person (its own cookie jar).
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from contextlib import asynccontextmanager
from gettext import GNUTranslations
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from babel.messages.catalog import Catalog as PoCatalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from llmgw.account import Accounts, Actor
from llmgw.account.keycache import KeyCache
from llmgw.accounting import Budgets
from llmgw.config import ClusterSettings
from llmgw.config.server import ServerConfig
from llmgw.control.settings import ClusterSettingsWatcher, seed_settings
from llmgw.events import Events
from llmgw.portal import i18n, mount, registered
from llmgw.trust import ensure_master_key
from llmgw.trust.masterkey import FILE_NAME as MASTER_KEY
from tests.support.pgcluster import free_port
from tests.support.servers import Server, SimEngine, write_config

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
LOCALES = Path(__file__).resolve().parents[2] / "locales"


class Plane:
    """What the admin pages use of the process serving them: the store, the settings, the config, the keys."""

    def __init__(self, store, settings: ClusterSettingsWatcher, cfg: ServerConfig):
        self.store = store
        self.settings = settings
        self.cfg = cfg
        self.keys = KeyCache(store, lambda: 60.0)
        self.router = SimpleNamespace(events=Events())  # what the pages tell of (a key revoked), as a router's


@pytest.fixture
async def plane(store, tmp_path) -> Plane:
    await seed_settings(store, ClusterSettings(), "server.yaml", "system")
    watcher = ClusterSettingsWatcher(store)
    await watcher.refresh()
    data = tmp_path / "data"
    data.mkdir()
    return Plane(store, watcher, ServerConfig(data_dir=str(data), store=f"sqlite:{data / 'llmgw.db'}"))


@pytest.fixture
async def people(store):
    accounts = Accounts(store)
    for email, role in (("ada@example.com", "admin"), ("olga@example.com", "operator"), ("bob@example.com", "member")):
        await accounts.people.add(ROOT, email=email, name=email.split("@")[0].title(), role=role, password=PASSWORD)
    return accounts.people


@pytest.fixture
def browser(plane, people):
    """browser(email) -> a signed-in client, each with its own cookies."""
    app = web.Application()
    mount(app, plane, registry=registered())

    @asynccontextmanager
    async def open_as(email: str, *, accept_language: str = "en"):
        async with TestClient(TestServer(app), headers={"Accept-Language": accept_language}) as client:
            page = await (await client.get("/signin")).text()
            signed = await client.post("/signin", data={"_csrf": _csrf(page), "email": email, "password": PASSWORD,
                                                        "next": "/"}, allow_redirects=False)
            assert signed.status == 303, await signed.text()
            yield client

    return open_as


def _csrf(page: str) -> str:
    found = re.search(r'name="_csrf" value="([^"]+)"', page)
    assert found, page[:2000]
    return found.group(1)


async def _post(client, path: str, data: dict, *, form_at: str | None = None):
    """Post a form as the page at `form_at` (or `path`) would, with that page's CSRF value."""
    page = await (await client.get(form_at or path)).text()
    return await client.post(path, data={"_csrf": _csrf(page), **data}, allow_redirects=False)


async def _pages(store) -> list[str]:
    ada = await store.person_by_email("ada@example.com")
    org = await store.create_org("Acme")
    return ["/admin", "/admin/people", f"/admin/people/{ada.id}", "/admin/tree", f"/admin/tree/org/{org.id}",
            "/admin/keys", "/admin/audit", "/admin/sign-in", "/admin/settings"]


async def test_each_admin_page_renders_for_an_admin(store, browser):
    async with browser("ada@example.com") as ada:
        for path in await _pages(store):
            answer = await ada.get(path)
            assert answer.status == 200, (path, await answer.text())
            assert "<h1>" in await answer.text()


async def test_a_member_gets_403_everywhere_under_admin(store, browser):
    async with browser("bob@example.com") as bob:
        for path in await _pages(store):
            answer = await bob.get(path)
            assert answer.status == 403, path
            assert "not for your role" in await answer.text()


async def test_an_operator_gets_the_admin_index_but_403_on_people_tree_keys_audit_and_settings(store, browser):
    async with browser("olga@example.com") as olga:
        index = await olga.get("/admin")
        assert index.status == 200
        assert "/admin/people" not in await index.text()
        for path in (await _pages(store))[1:]:
            assert (await olga.get(path)).status == 403, path


async def test_a_person_added_without_a_password_gets_one_shown_once_and_never_logged(store, browser):
    async with browser("ada@example.com") as ada:
        added = await _post(ada, "/admin/people", {"email": "cem@example.com", "name": "Cem", "role": "member",
                                                  "place": ""})
        page = await added.text()

        assert added.status == 200 and added.headers["Cache-Control"] == "no-store"
        password = re.search(r'<pre class="secret">([^<]+)</pre>', page).group(1)
        assert len(password) >= 10
        listed = await (await ada.get("/admin/people")).text()
        assert "cem@example.com" in listed and password not in listed
        entries = await store.list_audit(action="person.create", actor="ada@example.com")
        assert len(entries) == 1 and password not in str(entries[0].after)


async def test_every_change_on_these_pages_is_audited_as_the_admins_email_via_portal(store, plane, browser):
    accounts = Accounts(store)
    bob = await store.person_by_email("bob@example.com")
    async with browser("ada@example.com") as ada:
        person = f"/admin/people/{bob.id}"
        assert (await _post(ada, f"{person}/role", {"role": "operator"}, form_at=person)).status == 303
        assert (await _post(ada, f"{person}/suspend", {}, form_at=person)).status == 303
        assert (await _post(ada, f"{person}/suspend", {"lift": "1"}, form_at=person)).status == 303
        assert (await _post(ada, f"{person}/reset-password", {}, form_at=person)).status == 200
        assert (await _post(ada, "/admin/tree", {"kind": "org", "path": "Acme"})).status == 303
        assert (await _post(ada, "/admin/tree", {"kind": "team", "path": "Acme/ml"})).status == 303
        assert (await _post(ada, "/admin/tree", {"kind": "project", "path": "Acme/ml/app"})).status == 303
        assert (await _post(ada, f"{person}/places", {"place": "team:Acme/ml"}, form_at=person)).status == 303
        assert (await _post(ada, f"{person}/places", {"place": "team:Acme/ml", "leave": "1"},
                            form_at=person)).status == 303
        team = await store.team_by_name((await store.org_by_name("Acme")).id, "ml")
        limits = f"/admin/tree/team/{team.id}"
        assert (await _post(ada, limits, {"rpm": "60", "tpm": "", "budget": "5.00", "period": "day",
                                          "models": ""})).status == 303
        view, _ = await accounts.create_key(ROOT, name="ci", project="Acme/ml/app", create=True)
        assert (await _post(ada, f"/admin/keys/{view['id']}/revoke", {"back": "/admin/keys?page=1"},
                            form_at="/admin/keys")).status == 303
        assert (await _post(ada, "/admin/settings", {"expected_version": "1", "path": "auth.cache_ttl",
                                                    "value": "7s"})).status == 303

    done = {e.action: (e.actor, e.via) for e in await store.list_audit(limit=1000) if e.via == "portal"}
    assert set(done) == {"person.role", "person.suspend", "person.unsuspend", "person.reset_password", "org.create",
                         "team.create", "project.create", "person.join", "person.leave", "limits.set",
                         "key.revoke", "config.set"}
    assert set(done.values()) == {("ada@example.com", "portal")}
    assert (await store.get_limits("team", team.id)).budget_micros == 5_000_000
    assert str(plane.settings.current.auth.cache_ttl) == "7s"


async def test_a_team_made_with_a_budget_refuses_its_key_past_it(store, plane, browser):
    async with browser("ada@example.com") as ada:
        await _post(ada, "/admin/tree", {"kind": "org", "path": "Acme"})
        made = await _post(ada, "/admin/tree", {"kind": "team", "path": "Acme/ml", "budget": "1.00",
                                                "period": "month"})
        assert made.status == 303
        await _post(ada, "/admin/tree", {"kind": "project", "path": "Acme/ml/app"})
        tree = await (await ada.get("/admin/tree")).text()
        assert "budget 1.00 a month" in tree
    _, secret = await Accounts(store).create_key(ROOT, name="ci", project="Acme/ml/app", create=True)
    key = await plane.keys.lookup(secret)
    now = time.time()
    budgets = Budgets(store)
    await budgets.restore(now)

    budgets.charge(key, 1_000_000, now)
    refused = budgets.check(key, now)

    assert refused is not None and refused.status == 402 and refused.code == "budget_exceeded"
    assert refused.message == "the team Acme/ml has spent its 1.00 for this month"


async def test_a_limits_change_reaches_a_key_already_in_the_cache(store, plane, browser):
    accounts = Accounts(store)
    _, secret = await accounts.create_key(ROOT, name="ci", project="Acme/ml/app", create=True)
    before = await plane.keys.lookup(secret)
    assert before.limits.rpm is None
    async with browser("ada@example.com") as ada:
        project = (await store.project_by_path("Acme", "ml", "app")).project.id
        saved = await _post(ada, f"/admin/tree/project/{project}", {"rpm": "30", "models": "a, b",
                                                                        "tools": "jira.*, db.query"})
        assert saved.status == 303
        shown = await (await ada.get(f"/admin/tree/project/{project}")).text()

    after = await plane.keys.lookup(secret)
    assert after.limits.rpm == 30 and after.limits.allows_model("a") and not after.limits.allows_model("c")
    assert after.limits.allows_tool("jira.search") and not after.limits.allows_tool("db.drop")
    assert 'value="jira.*, db.query"' in shown


async def test_the_keys_page_shows_fifty_a_page_and_the_rest_on_the_next(store, browser):
    accounts = Accounts(store)
    for n in range(51):
        await accounts.create_key(ROOT, name=f"k{n:02d}", project="Acme/ml/app", create=True)
    async with browser("ada@example.com") as ada:
        first = await (await ada.get("/admin/keys")).text()
        second = await (await ada.get("/admin/keys?page=2")).text()

    assert first.count('action="/admin/keys/') == 50 and second.count('action="/admin/keys/') == 1
    assert "Page 1 of 2" in first and "Acme/ml/app" in first


async def test_the_audit_log_is_filtered_by_who_acted(store, browser):
    async with browser("ada@example.com") as ada:
        await _post(ada, "/admin/tree", {"kind": "org", "path": "Acme"})
        await Accounts(store).create_key(ROOT, name="ci", project="Acme/ml/app", create=True)
        mine = await (await ada.get("/admin/audit?actor=ada@example.com")).text()
        everyone = await (await ada.get("/admin/audit")).text()

    assert "org.create" in mine and "key.create" not in mine
    assert 'href="/admin/audit?actor=root"' in everyone  # each actor's name filters the log to them
    assert "org.create" in everyone and "key.create" in everyone


async def test_a_settings_form_read_before_another_change_is_refused_with_a_sentence(plane, browser):
    async with browser("ada@example.com") as ada:
        page = await (await ada.get("/admin/settings")).text()
        await plane.settings.change("root", "cli", set_={"auth.cache_ttl": "9s"})

        stale = await ada.post("/admin/settings", data={"_csrf": _csrf(page), "expected_version": "1",
                                                        "path": "auth.cache_ttl", "value": "7s"})
        said = await stale.text()

    assert stale.status == 409
    assert "changed since you read them (version 1, now 2); read them again" in said
    assert str(plane.settings.current.auth.cache_ttl) == "9s"


async def test_a_refusal_of_ctl_config_set_appears_in_turkish_on_the_settings_page(plane, browser, turkish):
    async with browser("ada@example.com", accept_language="tr-TR,tr;q=0.9") as ada:
        refused = await _post(ada, "/admin/settings", {"expected_version": "1", "path": "auth.session_idle",
                                                      "value": "0s"})
        said = await refused.text()

    assert refused.status == 400
    assert "auth.session_idle: 0&#39;dan uzun olmalı; verilen: 0s" in said
    assert plane.settings.version == 1


@pytest.fixture
def turkish(monkeypatch):
    """The Turkish catalogue compiled from every part's locales/tr/LC_MESSAGES/*.po, as build.py does."""
    merged = PoCatalog(locale="tr")
    for po in sorted((LOCALES / "tr" / "LC_MESSAGES").glob("*.po")):
        with po.open("rb") as f:
            for message in read_po(f):
                if message.id and message.string:
                    merged.add(message.id, message.string)
    compiled = io.BytesIO()
    write_mo(compiled, merged)
    compiled.seek(0)
    translations = GNUTranslations(compiled)
    real = i18n._catalogue
    monkeypatch.setattr(i18n, "_catalogue", lambda lang: translations if lang == "tr" else real(lang))


async def test_on_a_real_server_the_first_admin_changes_a_setting_and_the_audit_log_names_them(tmp_path):
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    admin = json.loads(done.stdout)["administrator"]
    server.start()
    try:
        async with aiohttp.ClientSession(server.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get("/signin") as page:
                csrf = _csrf(await page.text())
            async with http.post("/signin", data={"_csrf": csrf, "email": admin["email"],
                                                  "password": admin["password"]}, allow_redirects=False) as signed:
                assert signed.status == 303, await signed.text()
            async with http.get("/admin/settings") as page:
                form = await page.text()
                version = re.search(r'name="expected_version" value="(\d+)"', form).group(1)
            async with http.post("/admin/settings", data={"_csrf": _csrf(form), "expected_version": version,
                                                          "path": "auth.cache_ttl", "value": "7s"}) as saved:
                assert saved.status == 200 and "cache_ttl: 7s" in await saved.text()
            async with http.get("/admin/audit?action=config.set") as audit:
                logged = await audit.text()
        assert admin["email"] in logged and "portal" in logged
        assert server.ctl_json("ctl", "config", "get", "auth.cache_ttl")["value"] == "7s"
    finally:
        server.stop()


async def test_on_a_real_server_a_team_made_with_a_budget_on_the_page_refuses_its_key_past_it(tmp_path):
    engine = SimEngine(tmp_path, "qwen").start()
    # 1.00 a thousand answer tokens: each 10-token answer costs 0.01, so a 0.02 budget holds two.
    config = write_config(tmp_path / "gw.yaml", {"models": [
        {"name": "qwen", "endpoints": [engine.url], "price": {"completion_per_1k": 1_000_000}}]})
    server = Server(tmp_path, "gw", config=config)
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    admin = json.loads(done.stdout)["administrator"]
    server.start()
    try:
        async with aiohttp.ClientSession(server.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get("/signin") as page:
                csrf = _csrf(await page.text())
            async with http.post("/signin", data={"_csrf": csrf, "email": admin["email"],
                                                  "password": admin["password"]}, allow_redirects=False) as signed:
                assert signed.status == 303
            for made in ({"kind": "org", "path": "Acme"},
                         {"kind": "team", "path": "Acme/ml", "budget": "0.02", "period": "day"},
                         {"kind": "project", "path": "Acme/ml/app"}):
                async with http.get("/admin/tree") as page:
                    form = await page.text()
                async with http.post("/admin/tree", data={"_csrf": _csrf(form), **made},
                                     allow_redirects=False) as answer:
                    assert answer.status == 303, await answer.text()
        key = server.ctl_json("keys", "create", "ci", "--project", "Acme/ml/app", "--create")["key"]
        client = openai.OpenAI(api_key=key, base_url=server.client_url + "/v1", max_retries=0)
        ask = [{"role": "user", "content": "Say something."}]
        for _ in range(2):
            client.chat.completions.create(model="qwen", messages=ask, max_tokens=10)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="qwen", messages=ask, max_tokens=10)

        assert refused.value.status_code == 402 and refused.value.body["code"] == "budget_exceeded"
        assert "the team Acme/ml" in refused.value.body["message"]
    finally:
        server.stop()
        engine.stop()


# --- /admin/sign-in -----------------------------------------------------------------------------


async def test_a_directory_block_tried_on_the_sign_in_page_shows_the_failed_step_and_is_not_kept(plane, browser):
    port = free_port()  # leased: nothing listens there, so the call is made and refused
    block = (f"urls: [ldaps://127.0.0.1:{port}]\nbase_dn: ou=people,dc=corp,dc=example\ntimeout: 2s\n")
    async with browser("ada@example.com") as ada:
        answer = await _post(ada, "/admin/sign-in", {"action": "keep", "kind": "ldap", "block": block})
        page = await answer.text()

    assert answer.status == 422
    assert "A step failed, so nothing was kept." in page and f"127.0.0.1:{port}" in page
    assert not plane.settings.current.auth.ldap.urls


async def test_a_block_that_is_not_yaml_on_the_sign_in_page_is_a_sentence_and_the_text_stays_to_fix(browser):
    async with browser("ada@example.com") as ada:
        answer = await _post(ada, "/admin/sign-in", {"action": "try", "kind": "oidc", "block": "issuer: [unclosed"})
        page = await answer.text()

    assert answer.status == 400 and "the block is not YAML" in page and "issuer: [unclosed" in page


async def test_a_secret_sealed_on_the_sign_in_page_is_named_by_reference_and_its_value_never_shown(plane, browser,
                                                                                                   store):
    ensure_master_key(os.path.join(plane.cfg.data_dir, MASTER_KEY))
    async with browser("ada@example.com") as ada:
        answer = await _post(ada, "/admin/sign-in", {"action": "secret", "name": "ldap-bind",
                                                     "value": "Bind-pa55word-never-shown"})
        assert answer.status == 303
        page = await (await ada.get(answer.headers["Location"])).text()

    assert "store:auth/ldap-bind" in page and "Bind-pa55word-never-shown" not in page
    assert b"Bind-pa55word-never-shown" not in await store.sealed_secret("auth/ldap-bind")
