"""A person's keys page: make a key and see its secret once, see limits and spend, revoke only one's own."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.store import Limits, Usage
from tests.portal.members import NOW, ROOT, Plane, Text, app, csrf_of, seed, sign_in
from tests.support.servers import Server

SECRET = re.compile(r"sk-llmgw-[A-Za-z0-9_-]{20,}")


@pytest.fixture
async def world(store):
    return await seed(store)


@pytest.fixture
async def plane(store, world):
    return Plane(store)


@pytest.fixture
async def ada(plane):
    async with TestClient(TestServer(app(plane))) as client:
        client.csrf = await sign_in(client, "ada@example.com")
        yield client


async def make(client, name: str, project_id: str):
    return await client.post("/keys", data={"_csrf": client.csrf, "name": name, "project": project_id},
                             allow_redirects=False)


async def test_a_new_keys_secret_is_shown_once_and_is_absent_from_the_list_every_url_and_the_audit_log(
        ada, store, world):
    made = await make(ada, "laptop", world.paths["Acme/eng/web"].project.id)

    page = await made.text()
    assert made.status == 201 and "Location" not in made.headers
    assert made.headers["Cache-Control"] == "no-store"
    (secret,) = set(SECRET.findall(page))
    assert Text(page).by_id["secret"] == secret
    assert not [url for url in Text(page).urls if secret in url]
    listing = await (await ada.get("/keys")).text()
    (key,) = await store.list_keys(person_id=world.ada["id"])
    assert secret not in listing and f"{key.prefix}…" in Text(listing).text
    assert not [url for url in Text(listing).urls if secret in url]
    entries = await store.list_audit(limit=100)
    made_entry = [e for e in entries if e.action == "key.create"]
    assert made_entry and (made_entry[0].actor, made_entry[0].via) == ("ada@example.com", "portal")
    assert secret not in json.dumps([e.after for e in entries] + [e.before for e in entries], default=str)
    assert key.person_id == world.ada["id"] and key.name == "laptop"


async def test_only_ones_own_projects_are_offered_and_another_is_refused(ada, store, world):
    page = Text(await (await ada.get("/keys")).text())
    assert "Acme/eng/web" in page.text and "Acme/eng/api" not in page.text and "Other/ops/infra" not in page.text

    refused = await make(ada, "sneaky", world.paths["Acme/eng/api"].project.id)

    assert refused.status == 403
    assert "That project is not one of yours; choose one from the list." in Text(await refused.text()).text
    assert await store.list_keys(person_id=world.ada["id"]) == []


async def test_a_key_without_a_name_is_refused_with_the_form_kept(ada, store, world):
    refused = await make(ada, "  ", world.paths["Acme/eng/web"].project.id)

    assert refused.status == 400
    assert "A key needs a name of 1 to 128 characters" in Text(await refused.text()).text
    assert await store.list_keys(person_id=world.ada["id"]) == []


async def test_another_persons_key_cannot_be_revoked(ada, store, world, plane):
    view, _ = await world.accounts.create_key(ROOT, name="bob's", project="Other/ops/infra", create=True,
                                              person_email="bob@example.com")

    refused = await ada.post(f"/keys/{view['id']}/revoke", data={"_csrf": ada.csrf}, allow_redirects=False)

    assert refused.status == 404
    assert "You have no key with that id; the keys page lists yours." in Text(await refused.text()).text
    assert (await store.key_by_id(view["id"])).revoked_at is None
    assert plane.keys.invalidated == []


async def test_revoking_ones_own_key_ends_it_and_tells_the_key_cache(ada, store, world, plane):
    made = await make(ada, "old laptop", world.paths["Acme/eng/web"].project.id)
    csrf = csrf_of(await made.text())
    (key,) = await store.list_keys(person_id=world.ada["id"])

    revoked = await ada.post(f"/keys/{key.id}/revoke", data={"_csrf": csrf}, allow_redirects=False)

    assert revoked.status == 303 and revoked.headers["Location"] == "/keys"
    assert (await store.key_by_id(key.id)).revoked_at is not None
    assert plane.keys.invalidated == [key.id]
    page = Text(await (await ada.get("/keys")).text()).text
    assert "The key is revoked: requests that use it are refused." in page
    assert "revoked" in page
    (entry,) = [e for e in await store.list_audit(limit=100) if e.action == "key.revoke"]
    assert (entry.actor, entry.via) == ("ada@example.com", "portal")


async def test_each_key_shows_its_limits_and_its_spend_against_every_budget_on_its_chain(ada, store, world):
    path = world.paths["Acme/eng/web"]
    await make(ada, "laptop", path.project.id)
    (key,) = await store.list_keys(person_id=world.ada["id"])
    await store.put_limits(Limits("team", path.team.id, budget_micros=100_000_000, period="month"))
    await store.put_limits(Limits("project", path.project.id, rpm=60))
    await store.put_limits(Limits("key", key.id, budget_micros=5_000_000, period="day"))
    rows = [Usage(id=f"req_{n}", at=at, key_id=key.id, project_id=path.project.id, person_id=world.ada["id"],
                  model="llama", cost_micros=cost)
            for n, (at, cost) in enumerate([(NOW - 3600, 1_200_000), (NOW - 5 * 86400, 30_000_000)])]
    await store.add_usage(rows)

    page = Text(await (await ada.get("/keys")).text()).text

    assert "60 requests a minute (project)" in page
    assert "1.20 of 5.00 today (key)" in page
    assert "31.20 of 100.00 this month (team)" in page


async def test_a_key_made_on_the_page_works_against_v1_of_a_real_server(tmp_path):
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    admin = json.loads(done.stdout)["administrator"]
    server.start()
    try:
        async with aiohttp.ClientSession(server.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get("/signin") as page:
                pre = csrf_of(await page.text())
            async with http.post("/signin", data={"_csrf": pre, "email": admin["email"],
                                                  "password": admin["password"]}) as signed:
                keys_page = await signed.text()
            async with http.get("/keys") as page:
                keys_page = await page.text()
            project = re.search(r'<option value="([^"]+)">', keys_page).group(1)
            async with http.post("/keys", data={"_csrf": csrf_of(keys_page), "name": "sdk",
                                                "project": project}) as made:
                assert made.status == 201, await made.text()
                secret = Text(await made.text()).by_id["secret"]
        async with aiohttp.ClientSession(server.client_url) as client:
            async with client.get("/v1/models", headers={"Authorization": f"Bearer {secret}"}) as models:
                assert models.status == 200, await models.text()
                assert (await models.json())["object"] == "list"
        assert secret not in server.output(), "the server's log never holds a key's secret"
    finally:
        server.stop()
