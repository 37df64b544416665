"""The admin pages for operations: models, nodes, guardrails and usage by tenant.

In process: the portal mounted on an aiohttp app over a real store (both
dialects), signed in as an admin, an operator or a member through the real
sign-in form. The pages call the catalog and the usage reports for real.
"""

from __future__ import annotations

import json
import re
import time

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor
from llmgw.config import ClusterSettings
from llmgw.config.guard import GuardSettings, Pattern, Policy, Rules
from llmgw.protocol import GPU, GPUSensor, Heartbeat, Host, Register, to_dict
from llmgw.store import NodeRecord, Replica, Usage
from tests.portal.portalkit import PASSWORD, csrf_from, portal_app
from tests.portal.portalkit import sign_in as post_sign_in
from tests.support.servers import Server

ROOT = Actor("root", "cli")
PAGES = ("/admin/models", "/admin/nodes", "/admin/guardrails", "/admin/usage")
GUARD = GuardSettings(
    default=["standard"],
    policies={"standard": Policy(input=Rules(pii={"email": "redact"}, deny=[Pattern("codename", "bluebird")]),
                                 output=Rules(secrets="block"))})


@pytest.fixture
async def client(store):
    accounts = Accounts(store)
    for email, role in (("ada@example.com", "admin"), ("otto@example.com", "operator"),
                        ("bob@example.com", "member")):
        await accounts.people.add(ROOT, email=email, name=email.split("@")[0].title(), role=role,
                                  password=PASSWORD)
    async with TestClient(TestServer(portal_app(store, ClusterSettings(guard=GUARD)))) as c:
        yield c


async def sign_in(client, email: str) -> str:
    """Signs in through the form; the CSRF value the signed-in pages carry."""
    assert (await post_sign_in(client, email)).status == 303
    return await csrf_from(client, "/admin/models")  # a 403 page too has a form (sign out)


def text_of(html: str) -> str:
    """The page as a person reads it: tags gone, spaces folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.parametrize("path", PAGES)
async def test_every_operations_page_renders_for_an_admin(client, path):
    await sign_in(client, "ada@example.com")

    answer = await client.get(path)

    assert answer.status == 200
    assert "unsafe-inline" not in answer.headers["Content-Security-Policy"]


@pytest.mark.parametrize("path", ["/admin/models", "/admin/nodes", "/admin/guardrails"])
async def test_an_operator_sees_models_nodes_and_guardrails(client, path):
    await sign_in(client, "otto@example.com")

    assert (await client.get(path)).status == 200


@pytest.mark.parametrize("path", ["/admin/usage", "/admin/usage.csv"])
async def test_an_operator_is_refused_usage_because_it_is_money(client, path):
    await sign_in(client, "otto@example.com")

    answer = await client.get(path)

    assert answer.status == 403
    assert "not for your role" in await answer.text()


@pytest.mark.parametrize("path", [*PAGES, "/admin/usage.csv"])
async def test_a_member_is_refused_every_operations_page(client, path):
    await sign_in(client, "bob@example.com")

    assert (await client.get(path)).status == 403


async def test_the_admin_nav_shows_an_operator_only_what_they_may_open(client):
    await sign_in(client, "otto@example.com")

    page = await (await client.get("/admin/models")).text()

    nav = re.search(r'<nav class="admin".*?</nav>', page, re.S).group(0)
    assert 'href="/admin/models"' in nav and 'href="/admin/guardrails"' in nav
    assert 'href="/admin/usage"' not in nav


async def test_serving_scaling_and_stopping_from_the_page_change_the_catalog_and_are_audited_as_the_person(
        client, store):
    csrf = await sign_in(client, "otto@example.com")

    served = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": "/models/qwen.gguf",
                                                            "engine": "llamacpp", "min": "1"})
    assert served.status == 200 and str(served.url.path) == "/admin/models"
    assert "The change to qwen is saved" in await served.text()
    scaled = await client.post("/admin/models/qwen/scale", data={"_csrf": csrf, "min": "2", "max": "3"})
    assert scaled.status == 200
    stopped = await client.post("/admin/models/qwen/stop", data={"_csrf": csrf})
    assert stopped.status == 200

    record = await store.get_model("qwen")
    assert record.stopped and record.spec["scaling"]["min"] == 2 and record.spec["scaling"]["max"] == 3
    entries = sorted(await store.list_audit(), key=lambda e: e.at)
    assert [(e.action, e.target, e.actor, e.via) for e in entries if e.action.startswith("model.")] == [
        ("model.serve", "model:qwen", "otto@example.com", "portal"),
        ("model.scale", "model:qwen", "otto@example.com", "portal"),
        ("model.stop", "model:qwen", "otto@example.com", "portal"),
    ]
    page = text_of(await (await client.get("/admin/models")).text())
    assert "qwen" in page and "stopped" in page


async def test_a_model_file_added_from_the_page_is_in_the_catalog(client, store):
    csrf = await sign_in(client, "ada@example.com")

    answer = await client.post("/admin/models/add", data={
        "_csrf": csrf, "spec": "name: qwen\nsource: /models/qwen.gguf\nprofiles:\n  - engine: llamacpp\n"
                               "    memory: 4GB\n"})

    assert answer.status == 200
    assert (await store.get_model("qwen")) is not None
    (entry,) = [e for e in await store.list_audit() if e.action == "model.add"]
    assert (entry.actor, entry.via) == ("ada@example.com", "portal")


async def test_a_change_the_catalog_refuses_is_shown_as_its_sentence_and_changes_nothing(client, store):
    csrf = await sign_in(client, "ada@example.com")
    await client.post("/admin/models/add", data={"_csrf": csrf, "spec": "name: qwen\nsource: /models/qwen.gguf\n"
                                                                         "profiles:\n  - engine: llamacpp\n"})

    missing = await client.post("/admin/models/llama/scale", data={"_csrf": csrf, "min": "2"})
    taken = await client.post("/admin/models/serve", data={"_csrf": csrf, "source": "/models/qwen.gguf"})
    not_a_number = await client.post("/admin/models/qwen/scale", data={"_csrf": csrf, "min": "two"})

    assert missing.status == 404
    assert "the catalog has no model named llama (the models: qwen)" in text_of(await missing.text())
    assert taken.status == 409
    assert "/models/qwen.gguf" in await taken.text()  # what was typed is kept
    assert not_a_number.status == 400
    assert "must be a whole number, such as 2; it was “two”" in text_of(await not_a_number.text())
    assert [e.action for e in await store.list_audit() if e.action.startswith("model.")] == ["model.add"]


async def test_a_form_without_its_csrf_value_changes_no_model(client, store):
    await sign_in(client, "ada@example.com")

    refused = await client.post("/admin/models/serve", data={"source": "/models/qwen.gguf"})

    assert refused.status == 403
    assert await store.get_model("qwen") is None


async def test_the_nodes_page_shows_each_card_and_the_replica_holding_it(client, store):
    register = Register(node_id="id-gpu-1", name="gpu-1", version="1",
                        host=Host(hostname="gpu-1", cpu_cores=16, cpu_threads=16, memory_mb=65536),
                        gpus=[GPU(index=0, name="NVIDIA H100 80GB HBM3", memory_mb=81559, compute_capability="9.0"),
                              GPU(index=1, name="NVIDIA H100 80GB HBM3", memory_mb=81559, compute_capability="9.0")],
                        engines={"llamacpp": "b6000"})
    now = time.time()
    await store.put_node(NodeRecord("id-gpu-1", "gpu-1", to_dict(register), heartbeat=to_dict(Heartbeat(at=now)),
                                    heartbeat_at=now, first_seen=now, updated_at=now))
    await store.put_replicas([Replica("rep_1", "qwen", "id-gpu-1", state="ready", gpus=[1], cpu_cores=4,
                                      memory_mb=8192, since=now)])
    await sign_in(client, "otto@example.com")

    html = await (await client.get("/admin/nodes")).text()

    cards = re.search(r'<table class="cards">.*?</table>', html, re.S).group(0)
    rows = re.findall(r"<tr>.*?</tr>", cards, re.S)
    assert "nothing" in text_of(rows[1]) and "qwen" not in rows[1]  # card 0
    assert "qwen (rep_1)" in text_of(rows[2])  # card 1
    page = text_of(html)
    assert "gpu-1" in page and "16" in page and "NVIDIA H100 80GB HBM3" in page


async def test_the_nodes_page_shows_what_each_ready_engine_says_of_its_own_work(client, store):
    # A vLLM engine's /metrics as vLLM 0.32 writes it: two running, one waiting, 31% of its KV cache, 128 of 490
    # prompt tokens found in its prefix cache, 8 first tokens in 0.328 s.
    page = ('vllm:num_requests_running{engine="0",model_name="qwen"} 2.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="qwen"} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.31\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 490.0\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 128.0\n'
            'vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen"} 0.328\n'
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 8.0\n')
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=page)

    engine = web.Application()
    engine.router.add_get("/metrics", metrics)
    async with TestServer(engine, host="127.0.0.1") as served:
        now = time.time()
        await store.put_node(NodeRecord("id-cpu-1", "cpu-1", to_dict(Register(
            node_id="id-cpu-1", name="cpu-1", version="1", host=Host(hostname="cpu-1", cpu_cores=4, cpu_threads=4,
                                                                      memory_mb=16384))),
            heartbeat=to_dict(Heartbeat(at=now)), heartbeat_at=now, first_seen=now, updated_at=now))
        await store.put_replicas([
            Replica("rep_1", "qwen", "id-cpu-1", state="ready", url=f"http://127.0.0.1:{served.port}/v1",
                    cpu_cores=1, memory_mb=4096, since=now),
            Replica("rep_2", "qwen", "id-cpu-1", state="starting", url="", cpu_cores=1, memory_mb=4096, since=now)])
        await sign_in(client, "otto@example.com")

        html = await (await client.get("/admin/nodes")).text()

    rows = re.findall(r"<tr>.*?</tr>", re.search(r'<table class="replicas">.*?</table>', html, re.S).group(0), re.S)
    ready = text_of(next(row for row in rows if "rep_1" in row))
    assert "2 running, 1 waiting, KV cache 31%, cache hits 26%, answers start in 41 ms" in ready
    assert "running" not in text_of(next(row for row in rows if "rep_2" in row)), "a starting engine is not asked"


async def test_the_nodes_page_shows_each_cards_memory_as_a_bar_and_how_busy_it_is(client, store):
    # The readings as an H100 node's agent sends them (NVML's answers: tests/agent/discovery/fakenvml.py):
    # card 0 busy with GPM's SM figure, card 1 idle on a driver without GPM.
    register = Register(node_id="id-gpu-1", name="gpu-1", version="1",
                        host=Host(hostname="gpu-1", cpu_cores=16, cpu_threads=16, memory_mb=65536),
                        gpus=[GPU(index=0, name="NVIDIA H100 80GB HBM3", memory_mb=81559, compute_capability="9.0"),
                              GPU(index=1, name="NVIDIA H100 80GB HBM3", memory_mb=81559, compute_capability="9.0")])
    beat = Heartbeat(at=time.time(), gpus=[
        GPUSensor(index=0, utilization_percent=92, memory_used_mb=73403, temperature_c=71, power_w=612.4,
                  power_limit_w=700, has_profile=True, sm_active_percent=69.0, sm_occupancy_percent=45.5,
                  profile_source="gpm"),
        GPUSensor(index=1, utilization_percent=0, memory_used_mb=512, temperature_c=33, power_w=71)])
    now = time.time()
    await store.put_node(NodeRecord("id-gpu-1", "gpu-1", to_dict(register), heartbeat=to_dict(beat),
                                    heartbeat_at=now, first_seen=now, updated_at=now))
    await sign_in(client, "otto@example.com")

    html = await (await client.get("/admin/nodes")).text()
    turkish = await (await client.get("/admin/nodes", headers={"Accept-Language": "tr-TR,tr;q=0.9"})).text()

    rows = re.findall(r"<tr>.*?</tr>", re.search(r'<table class="cards">.*?</table>', html, re.S).group(0), re.S)
    assert 'max="81559"' in rows[1] and 'value="73403"' in rows[1] and "<meter" in rows[1]
    assert "73,403 of 81,559 MB" in text_of(rows[1])
    assert "92% busy" in text_of(rows[1]) and "SMs 69% active" in text_of(rows[1])
    assert 'value="512"' in rows[2] and "0% busy" in text_of(rows[2])
    assert "SMs" not in rows[2]  # no GPM on this card: nothing, not 0%
    tr_rows = re.findall(r"<tr>.*?</tr>", re.search(r'<table class="cards">.*?</table>', turkish, re.S).group(0),
                         re.S)
    assert "%92 meşgul" in text_of(tr_rows[1]) and "SM etkinliği %69" in text_of(tr_rows[1])
    assert "Kullanılan bellek" in text_of(tr_rows[0]) and "İş yükü" in text_of(tr_rows[0])


async def test_a_lost_nodes_cards_show_no_readings_rather_than_its_last_ones(client, store):
    register = Register(node_id="id-gpu-2", name="gpu-2", version="1", host=Host(hostname="gpu-2", cpu_cores=8),
                        gpus=[GPU(index=0, name="NVIDIA L40S", memory_mb=46068, compute_capability="8.9")])
    then = time.time() - 3600  # silent for an hour: lost
    beat = Heartbeat(at=then, gpus=[GPUSensor(index=0, utilization_percent=92, memory_used_mb=40000)])
    await store.put_node(NodeRecord("id-gpu-2", "gpu-2", to_dict(register), heartbeat=to_dict(beat),
                                    heartbeat_at=then, first_seen=then, updated_at=then))
    await sign_in(client, "otto@example.com")

    html = await (await client.get("/admin/nodes")).text()

    card = re.findall(r"<tr>.*?</tr>", re.search(r'<table class="cards">.*?</table>', html, re.S).group(0), re.S)[1]
    assert "<meter" not in card and "busy" not in card
    assert "not reported" in text_of(card)


async def test_the_guardrails_page_shows_the_policies_and_the_latest_decisions_but_never_text(client, store):
    project = (await store.ensure_project("acme", "ml", "chat")).project
    await store.add_usage([
        Usage(id="req_1", at=time.time() - 60, key_id=None, project_id=project.id, model="qwen",
              detail={"guard": [{"rule": "pii:email", "action": "redact", "direction": "input",
                                 # a field no decision has: were text ever stored by mistake, it stays unshown
                                 "text": "mail ada.secret@example.com"}]}),
        Usage(id="req_2", at=time.time() - 30, key_id=None, project_id=project.id, model="qwen",
              detail={"api": "chat", "error": "rate_limited"}),
    ])
    await sign_in(client, "otto@example.com")

    html = await (await client.get("/admin/guardrails")).text()

    page = text_of(html)
    assert "standard" in page and "every request" in page
    assert "Enforced. When a check cannot answer" in page  # sentences read apart, not run together
    assert "pii:email" in page and "deny:codename" in page and "secrets" in page
    decisions = text_of(re.search(r'<table class="decisions">.*?</table>', html, re.S).group(0))
    assert "pii:email redact prompt qwen acme/ml/chat req_1" in decisions
    assert "req_2" not in decisions
    assert "ada.secret" not in html and "bluebird" not in html


async def test_usage_by_project_shows_each_tenants_sums_a_chart_and_a_csv_of_the_rows(client, store):
    chat = (await store.ensure_project("acme", "ml", "chat")).project
    search = (await store.ensure_project("acme", "web", "search")).project
    now = time.time()
    await store.add_usage([
        Usage(id="req_1", at=now - 60, key_id=None, project_id=chat.id, model="qwen", prompt_tokens=100,
              completion_tokens=10, cost_micros=2_500_000),
        Usage(id="req_2", at=now - 50, key_id=None, project_id=chat.id, model="llama", cost_micros=500_000),
        Usage(id="req_3", at=now - 40, key_id=None, project_id=search.id, model="qwen", cost_micros=1_000_000,
              status=500),
        Usage(id="req_old", at=now - 40 * 86400, key_id=None, project_id=search.id, model="qwen",
              cost_micros=9_000_000),
    ])
    await sign_in(client, "ada@example.com")

    html = await (await client.get("/admin/usage?days=30&by=project")).text()

    table = [text_of(r) for r in re.findall(r"<tr>.*?</tr>", re.search(
        r'<table class="usage">.*?</table>', html, re.S).group(0), re.S)]
    assert table[1:] == ["acme/ml/chat 2 0 100 10 3.00", "acme/web/search 1 1 0 0 1.00",
                         "Total 3 1 100 10 4.00"]
    assert "<svg" in html and "<rect" in html
    assert re.search(r'<link rel="stylesheet" href="/static/[0-9a-f]+/member.css">', html)  # the bars' colours
    by_model = text_of(await (await client.get("/admin/usage?days=90&by=model")).text())
    assert "qwen 3 1 100 10 12.50" in by_model and "Total 4 1 100 10 13.00" in by_model
    csv = await client.get("/admin/usage.csv?days=7")
    assert csv.status == 200 and csv.headers["Content-Type"].startswith("text/csv")
    assert "attachment" in csv.headers["Content-Disposition"]
    lines = (await csv.text()).splitlines()
    assert lines[0].startswith("id,at,time,key_id,project_id,model")
    assert sorted(line.split(",")[0] for line in lines[1:]) == ["req_1", "req_2", "req_3"]


def legend_of(html: str) -> list[str]:
    """The chart's legend as a reader sees it: each swatch's name, its full name where it is cut."""
    svg = re.search(r"<svg.*?</svg>", html, re.S).group(0)
    return [title or text for title, text in
            re.findall(r'<text class="legend"[^>]*>(?:<title>(.*?)</title>)?(.*?)</text>', svg, re.S)]


def usage_table(html: str) -> list[str]:
    """The first cell of each row of the usage table, header and total left out."""
    table = re.search(r'<table class="usage">.*?</table>', html, re.S).group(0)
    return [text_of(cell) for cell in re.findall(r"<tr><td>(.*?)</td>", table, re.S)]


async def test_the_usage_charts_legend_names_each_project_and_person_as_the_table_does(client, store):
    # Issue 25: by project, the legend read prj_… ids above a table of ORG/TEAM/PROJECT names.
    chat = (await store.ensure_project("acme", "ml", "chat")).project
    search = (await store.ensure_project("acme-research-laboratories", "retrieval", "search")).project
    bob = next(p for p in await store.list_people() if p.email == "bob@example.com")
    now = time.time()
    await store.add_usage([
        Usage(id="req_1", at=now - 60, key_id=None, project_id=chat.id, model="qwen", cost_micros=4_000_000,
              person_id=bob.id),
        Usage(id="req_2", at=now - 50, key_id=None, project_id=search.id, model="qwen", cost_micros=2_000_000),
        Usage(id="req_3", at=now - 40, key_id=None, project_id=None, model="qwen", cost_micros=1_000_000),
    ])
    await sign_in(client, "ada@example.com")

    by_project = await (await client.get("/admin/usage?days=7&by=project")).text()
    by_person = await (await client.get("/admin/usage?days=7&by=person")).text()

    assert usage_table(by_project) == ["acme/ml/chat", "acme-research-laboratories/retrieval/search", "none"]
    assert legend_of(by_project) == usage_table(by_project)
    assert "prj_" not in re.search(r"<svg.*?</svg>", by_project, re.S).group(0)
    assert usage_table(by_person) == ["bob@example.com", "none"]
    assert legend_of(by_person) == usage_table(by_person)
    assert bob.id not in by_person
    bar = re.search(r'<rect class="bar bar-0"[^>]*><title>(.*?)</title>', by_project).group(1)
    assert bar.endswith(": acme/ml/chat, 4.00")  # the bar's own title names it too


@pytest.mark.integration
async def test_a_real_server_serves_the_operations_pages_and_a_model_served_from_them(tmp_path):
    server = Server(tmp_path, "cp1")
    done = server.init("--json")
    assert done.returncode == 0, done.stderr
    admin = json.loads(done.stdout)["administrator"]
    server.start()
    try:
        async with aiohttp.ClientSession(server.client_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get("/signin") as page:
                csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
            async with http.post("/signin", data={"_csrf": csrf, "email": admin["email"],
                                                  "password": admin["password"]}, allow_redirects=False) as signed:
                assert signed.status == 303, await signed.text()
            for path in (*PAGES, "/admin/usage.csv"):
                async with http.get(path) as answer:
                    assert answer.status == 200, (path, await answer.text())
            async with http.get("/admin/models") as page:
                csrf = re.search(r'name="_csrf" value="([^"]+)"', await page.text()).group(1)
            async with http.post("/admin/models/serve", data={"_csrf": csrf, "source": "/models/qwen.gguf",
                                                              "engine": "llamacpp"}) as served:
                assert served.status == 200
                page = text_of(await served.text())
        assert "The change to qwen is saved" in page and "waiting for room" in page
    finally:
        server.stop()


async def test_the_operations_pages_are_in_turkish_for_a_turkish_browser(client, store):
    csrf = await sign_in(client, "otto@example.com")
    turkish = {"Accept-Language": "tr-TR,tr;q=0.9"}

    served = await client.post("/admin/models/serve", headers=turkish,
                               data={"_csrf": csrf, "source": "/models/qwen.gguf", "engine": "llamacpp"})
    page = text_of(await served.text())
    nodes = text_of(await (await client.get("/admin/nodes", headers=turkish)).text())

    assert "Modeller" in page and "Bir model sun" in page
    assert "qwen için değişiklik kaydedildi" in page and "yer bekliyor" in page
    assert "Düğümler" in nodes and "Henüz hiçbir düğüm katılmadı" in nodes


async def test_usage_of_models_that_cost_nothing_says_no_spend_and_offers_the_requests_view(client, store):
    # Issue 25: the cost view drew nothing over a model with no price and said "Nothing was used" above
    # a table of its 15 requests.
    chat = (await store.ensure_project("acme", "ml", "chat")).project
    now = time.time()
    await store.add_usage([Usage(id=f"req_{n}", at=now - 60 - n, key_id=None, project_id=chat.id, model="free",
                                 prompt_tokens=10, completion_tokens=5) for n in range(15)])
    await sign_in(client, "ada@example.com")

    html = await (await client.get("/admin/usage?days=7&by=model")).text()

    said = re.search(r'<p class="chart-empty">(.*?)</p>', html, re.S).group(1)
    assert text_of(said) == "No spend in this span: the models used cost nothing. Show the requests instead"
    assert 'href="/admin/usage?days=7&amp;by=model&amp;metric=requests"' in said
    assert "Nothing was used" not in text_of(html) and "free 15 0 150 75 0.00" in text_of(html)
    requests = await (await client.get("/admin/usage?days=7&by=model&metric=requests")).text()
    assert "chart-empty" not in requests and '<rect class="bar bar-0"' in requests
    turkish = await (await client.get("/admin/usage?days=7", headers={"Accept-Language": "tr"})).text()
    assert "Bu aralıkta harcama yok: kullanılan modeller ücretsiz." in turkish


async def test_usage_of_a_span_with_no_request_says_nothing_was_used(client):
    await sign_in(client, "ada@example.com")

    page = text_of(await (await client.get("/admin/usage?days=7")).text())

    assert page.count("Nothing was used in this span.") == 2  # the chart's place and the table's
    assert "Show the requests instead" not in page
