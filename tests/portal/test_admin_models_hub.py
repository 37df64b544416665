"""The models page adds models from a Hugging Face hub through the same pinning as `ctl model serve`, and only an
administrator may vouch for a publisher outside the trusted ones.

In process: the portal over a real store (both dialects), a hub speaking Hugging Face's API (tests/support/hfhub.py)
in the same event loop, signed in through the real form.
"""

from __future__ import annotations

import hashlib
import re
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings, HubSettings
from tests.portal.portalkit import PASSWORD, csrf_from, portal_app
from tests.portal.portalkit import sign_in as post_sign_in
from tests.support.hfhub import Hub, gguf_bytes

ROOT = Actor("root", "cli")
WEIGHTS = gguf_bytes()


@pytest.fixture
async def hub():
    hub = await Hub().start()
    hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    hub.repo("someone/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    yield hub
    await hub.stop()


@pytest.fixture
async def client(store, hub):
    accounts = Accounts(store)
    for email, role in (("ada@example.com", "admin"), ("otto@example.com", "operator")):
        await accounts.people.add(ROOT, email=email, name=email.split("@")[0].title(), role=role, password=PASSWORD)
    async with TestClient(TestServer(portal_app(store, ClusterSettings(hub=HubSettings(endpoint=hub.url))))) as c:
        yield c


async def sign_in(client, email: str) -> str:
    assert (await post_sign_in(client, email)).status == 303
    return await csrf_from(client, "/admin/models")


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


async def test_a_model_served_from_the_page_is_pinned_as_from_the_command_line(client, hub, store):
    csrf = await sign_in(client, "otto@example.com")
    served = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": "hf:Qwen/Tiny-GGUF/tiny.gguf",
                                                            "engine": "llamacpp", "min": "1"})
    assert served.status == 200 and "The change to tiny is saved" in await served.text()
    spec = (await store.get_model("tiny")).spec
    assert spec["source"] == f"hf:Qwen/Tiny-GGUF/tiny.gguf@{hub.repos['Qwen/Tiny-GGUF'].main}"
    assert spec["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()


async def test_an_operator_is_refused_an_untrusted_publisher_and_offered_no_box_to_vouch(client, store):
    csrf = await sign_in(client, "otto@example.com")
    page = await (await client.get("/admin/models")).text()
    assert 'name="trust"' not in page
    source = "hf:someone/Tiny-GGUF/tiny.gguf"
    refused = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": source, "engine": "llamacpp"})
    assert refused.status == 403
    assert "someone is not among the publishers this cluster trusts" in text_of(await refused.text())
    forced = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": source, "engine": "llamacpp",
                                                            "trust": "1"})
    assert forced.status == 400
    assert "Only an administrator may vouch for a publisher" in text_of(await forced.text())
    assert await store.get_model("tiny") is None


async def test_an_administrator_who_ticks_the_box_adds_it_and_is_named_in_its_origin(client, store):
    csrf = await sign_in(client, "ada@example.com")
    page = await (await client.get("/admin/models")).text()
    assert 'name="trust"' in page
    served = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": "hf:someone/Tiny-GGUF/tiny.gguf",
                                                            "engine": "llamacpp", "trust": "1"})
    assert served.status == 200
    origin = (await store.get_model("tiny")).spec["origin"]
    assert (origin["trusted"], origin["trusted_by"]) == ("administrator", "ada@example.com")


async def put_node(store) -> None:
    from llmgw.protocol import Heartbeat, Host, Register, to_dict
    from llmgw.store import NodeRecord

    now = time.time()
    register = Register(node_id="id-cpu01", name="cpu01", version="1", engines={"llamacpp": "b6000"},
                        host=Host(hostname="cpu01", cpu_cores=8, cpu_threads=8, memory_mb=32 * 1024))
    await store.put_node(NodeRecord("id-cpu01", "cpu01", to_dict(register),
                                    heartbeat=to_dict(Heartbeat(at=now, mem_bandwidth_gbs=40.0)), heartbeat_at=now,
                                    first_seen=now, updated_at=now))


async def test_a_search_on_the_page_lists_what_runs_here_and_its_plan_serves_the_way_chosen(client, hub, store):
    await put_node(store)
    csrf = await sign_in(client, "otto@example.com")
    found = await client.get("/admin/models", params={"q": "tiny"})
    assert found.status == 200
    page = await found.text()
    words = text_of(page)
    assert "Judged by 1 node(s) with 0 card(s) as they are now, at 4096 tokens of context." in words
    assert "Qwen/Tiny-GGUF" in words and "cpu on cpu01" in words
    link = "/admin/models/plan?source=hf%3AQwen/Tiny-GGUF/tiny.gguf"
    assert f'href="{link}"' in page

    planned = await client.get(link)
    assert planned.status == 200
    words = text_of(await planned.text())
    assert "Plan of Qwen/Tiny-GGUF" in words
    assert "pipeline: one node: a pipeline runs across several" in words
    served = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": "hf:Qwen/Tiny-GGUF/tiny.gguf",
                                                            "layout": "1", "context": "4096", "min": "1"})
    assert served.status == 200 and "The change to tiny is saved" in await served.text()
    spec = (await store.get_model("tiny")).spec
    assert spec["profiles"][0]["engine"] == "llamacpp" and spec["context_length"] == 4096
    assert spec["origin"]["commit"] == hub.repos["Qwen/Tiny-GGUF"].main


async def test_a_plan_of_what_the_hub_lacks_shows_the_hubs_sentence(client):
    await sign_in(client, "ada@example.com")
    answer = await client.get("/admin/models/plan", params={"source": "hf:Qwen/Nothing-GGUF/x.gguf"})
    assert answer.status == 404
    assert "has no model repository Qwen/Nothing-GGUF" in text_of(await answer.text())
