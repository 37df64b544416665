"""/admin/mirror: the model mirrors and their files, as the control plane's keeper reads them.

In process: the portal over a real store, two models served through the models page from a Hugging Face stand-in
(tests/support/hfhub.py), a real mirror on loopback over the cluster's mutual TLS (tests/support/mirrors.py), and
the control plane's own MirrorKeeper reading it with a control plane's certificate, as `llmgw server` does; the
page shows what the keeper read.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import re
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings, HubSettings, MirrorSettings
from llmgw.control.mirrors import MirrorKeeper
from llmgw.portal import i18n
from tests.portal.portalkit import PASSWORD, Plane, csrf_from, portal_app
from tests.portal.portalkit import sign_in as post_sign_in
from tests.support.hfhub import Hub, gguf_bytes
from tests.support.mirrors import Certs, mirror_config, running_mirror
from tests.support.pgcluster import free_port

# The page reads no table of its own: one dialect is enough.
pytestmark = pytest.mark.parametrize("dialect", ["sqlite"])

ROOT = Actor("root", "cli")
TINY = gguf_bytes()
BIG = gguf_bytes(parameters=750_000)  # about 3 MB: long enough to be caught half-way


def text_of(page: str) -> str:
    """The page as a person reads it: tags gone, entities read, spaces folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@pytest.fixture
async def hub():
    hub = Hub()
    hub.repo("acme/tiny", files={"tiny.gguf": TINY, "big.gguf": BIG}, security={"big.gguf": "suspicious"})
    await hub.start()
    yield hub
    await hub.stop()


async def people(store) -> None:
    accounts = Accounts(store)
    for email, role in (("ada@example.com", "admin"), ("otto@example.com", "operator"),
                        ("bob@example.com", "member")):
        await accounts.people.add(ROOT, email=email, name=email.split("@")[0].title(), role=role, password=PASSWORD)


async def sign_in(client, email: str) -> str:
    assert (await post_sign_in(client, email)).status == 303
    return await csrf_from(client, "/profile")


def keeper_plane(store, settings: ClusterSettings, certs: Certs | None = None) -> Plane:
    """The test's plane with the control plane's keeper on it, reading the mirrors with cp1's certificate."""
    plane = Plane(store, settings)
    keeper = MirrorKeeper(store, lambda: settings.mirror,
                          lambda: certs.control_plane_ssl("cp1") if certs is not None else None, leading=lambda: True)
    # agents.changed: what the models page sets after a change, for the leader's next pass.
    plane.cluster = SimpleNamespace(mirrors=keeper, agents=SimpleNamespace(changed=asyncio.Event()))
    return plane


async def read_until(keeper: MirrorKeeper, done, timeout: float = 20.0) -> dict:
    """Read the mirrors as the keeper's loop does, until `done(view)`; the view then."""
    for _ in range(int(timeout / 0.05)):
        await keeper.read_all()
        view = keeper.view()
        if done(view):
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"the mirror never got there: {keeper.view()}")


def on_first(view: dict, path: str) -> dict:
    """The file's state and progress on the one mirror that lists it (the other never answers); {} if none does."""
    row = next((f for f in view["files"] if f["path"] == path), None)
    return {} if row is None else next(iter(row["mirrors"].values()))


async def test_the_page_shows_each_file_its_models_and_a_download_half_way_then_held(
        tmp_path, store, hub):
    await people(store)
    certs = Certs(tmp_path / "certs")
    commit = hub.repos["acme/tiny"].main
    # The big file's download stops a while after its first 300 kB, as a slow link would.
    hub.stall_next("/cdn/*/big.gguf", after_bytes=300_000, seconds=2.5)
    down = f"https://127.0.0.1:{free_port()}"  # named as the second mirror, and nothing listens there
    async with running_mirror(mirror_config(tmp_path / "m1", certs.control_plane("cp1"), hub.url)) as (_, base):
        settings = ClusterSettings(hub=HubSettings(endpoint=hub.url, trusted_publishers=["acme"]),
                                   mirror=MirrorSettings(url=base, peers=[down]))
        plane = keeper_plane(store, settings, certs)
        keeper = plane.cluster.mirrors
        async with TestClient(TestServer(portal_app(store, plane=plane))) as client:
            csrf = await sign_in(client, "ada@example.com")
            for name in ("tiny", "big"):
                served = await client.post("/admin/models/serve", data={
                    "_csrf": csrf, "source": f"hf:acme/tiny/{name}.gguf", "engine": "llamacpp", "min": "1"})
                assert served.status == 200, text_of(await served.text())

            # The leader's keeper tells the mirror the catalog's pins and reads how far it has got.
            view = await read_until(keeper, lambda v: on_first(v, "big.gguf").get("state") == "fetching"
                                    and (on_first(v, "big.gguf").get("progress") or {}).get("done", 0) > 0)
            progress = on_first(view, "big.gguf")["progress"]
            assert 0 < progress["done"] < progress["total"] == len(BIG)
            answer = await client.get("/admin/mirror")
            assert answer.status == 200
            page = await answer.text()
            words = text_of(page)
            assert f"{base} answering" in words
            assert f"{down} not answering" in words
            said = next(m["error"] for m in view["mirrors"] if m["url"] == down)
            assert said and said in words
            row = re.search(r'<tr id="file-\d+">(?:(?!</tr>).)*big\.gguf.*?</tr>', page, re.S).group(0)
            assert "acme/tiny" in row and commit[:12] in row and f'title="{commit}"' in row
            assert "big" in text_of(row) and "fetching" in text_of(row)
            percent = i18n.percent("en", progress["done"] / progress["total"])
            assert (f"{percent}: {i18n.number('en', progress['done'])} of {i18n.number('en', len(BIG))} bytes"
                    in text_of(row))
            assert f'<progress max="{len(BIG)}" value="{progress["done"]}">' in row
            assert re.search(r'class="scan-flagged">⚠ suspicious<', row)
            assert "A file is being fetched." in words and 'href="/admin/mirror"' in page
            turkish = text_of(await (await client.get("/admin/mirror", headers={"Accept-Language": "tr"})).text())
            assert (f"{i18n.percent('tr', progress['done'] / progress['total'])}: "
                    f"{i18n.number('tr', progress['done'])} / {i18n.number('tr', len(BIG))} bayt") in turkish
            assert "indiriliyor" in turkish and "şüpheli" in turkish

            await read_until(keeper, lambda v: on_first(v, "big.gguf").get("state") == "held"
                             and on_first(v, "tiny.gguf").get("state") == "held")
            page = await (await client.get("/admin/mirror")).text()
    rows = dict(re.findall(r'<tr id="file-\d+">(?:(?!</tr>).)*?<code>(\w+\.gguf)</code>(.*?)</tr>', page, re.S))
    for name, data in (("big.gguf", BIG), ("tiny.gguf", TINY)):
        sha = hashlib.sha256(data).hexdigest()
        assert f'<code title="{sha}">{sha[:12]}</code>' in rows[name]
        cells = text_of(rows[name])
        assert name.removesuffix(".gguf") in cells and "held" in cells and "fetching" not in cells
        assert "not listed" in cells  # on the mirror that does not answer
    assert "3 MB" in text_of(rows["big.gguf"])
    assert "A file is being fetched." not in text_of(page)


async def test_an_operator_and_a_member_are_refused_the_page_and_not_shown_its_link(store):
    await people(store)
    plane = keeper_plane(store, ClusterSettings())
    for email in ("otto@example.com", "bob@example.com"):
        async with TestClient(TestServer(portal_app(store, plane=plane))) as client:
            await sign_in(client, email)
            refused = await client.get("/admin/mirror")
            assert refused.status == 403
            assert "not for your role" in await refused.text()
            assert 'href="/admin/mirror"' not in await (await client.get("/profile")).text()
    async with TestClient(TestServer(portal_app(store, plane=plane))) as client:
        await sign_in(client, "ada@example.com")
        nav = re.search(r'<nav class="admin".*?</nav>', await (await client.get("/profile")).text(), re.S).group(0)
    assert nav.index('href="/admin/nodes"') < nav.index('href="/admin/mirror"') < nav.index('href="/admin/guardrails"')


async def test_with_no_mirror_set_the_page_says_how_to_set_one(store):
    await people(store)
    async with TestClient(TestServer(portal_app(store, plane=keeper_plane(store, ClusterSettings())))) as client:
        await sign_in(client, "ada@example.com")
        answer = await client.get("/admin/mirror")
        page = await answer.text()
        said = text_of(await (await client.get("/admin/mirror", headers={"Accept-Language": "tr"})).text())

    assert answer.status == 200
    words = text_of(page)
    assert "No model mirror is set: each node fetches its own copy from Hugging Face." in words
    assert "llmgw ctl config set mirror.url https://HOST:8600" in words and "docs/mirror.md" in words
    assert "<table" not in page
    assert "llmgw ctl config set mirror.url https://HOST:8600" in said and "No model mirror is set" not in said


async def test_a_process_that_does_not_read_the_mirrors_says_so_rather_than_show_none(store):
    await people(store)
    settings = ClusterSettings(mirror=MirrorSettings(url="https://10.0.0.9:8600"))
    async with TestClient(TestServer(portal_app(store, settings))) as client:  # a worker's plane: no cluster
        await sign_in(client, "ada@example.com")
        words = text_of(await (await client.get("/admin/mirror")).text())

    assert "This process does not read the mirrors" in words and "No model mirror is set" not in words
