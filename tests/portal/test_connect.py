"""Connect your editor: each tool's snippet with this gateway's address, a model, and one's key."""

from __future__ import annotations

import re
import shlex
import tomllib

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from tests.portal.members import ROOT, Plane, Text, app, csrf_of, seed, sign_in, with_address


@pytest.fixture
async def world(store):
    return await seed(store)


async def client_for(plane: Plane):
    client = TestClient(TestServer(app(plane)))
    await client.start_server()
    client.csrf = await sign_in(client, "ada@example.com")
    return client


@pytest.fixture
async def ada(store, world):
    client = await client_for(Plane(store))
    yield client
    await client.close()


def snippet(page: str, n: int) -> str:
    return Text(page).by_id[f"snippet-{n}"]


def exports(text: str) -> dict[str, str]:
    return dict(shlex.split(line)[1].split("=", 1) for line in text.splitlines() if line.startswith("export"))


async def test_the_address_is_portal_address_when_set(store, world):
    client = await client_for(Plane(store, with_address("https://llm.example.com/")))
    try:
        page = await (await client.get("/connect?tool=codex")).text()
        claude = await (await client.get("/connect?tool=claude")).text()
    finally:
        await client.close()

    assert tomllib.loads(snippet(page, 1))["model_providers"]["llmgw"]["base_url"] == "https://llm.example.com/v1"
    assert exports(snippet(claude, 1))["ANTHROPIC_BASE_URL"] == "https://llm.example.com"


async def test_without_portal_address_it_is_the_one_the_browser_used_and_claude_codes_has_no_v1(ada):
    host = f"{ada.server.host}:{ada.server.port}"

    python = await (await ada.get("/connect?tool=python")).text()
    claude = await (await ada.get("/connect?tool=claude")).text()

    assert f'base_url="http://{host}/v1"' in snippet(python, 1)
    compile(snippet(python, 1), "hello.py", "exec")
    found = exports(snippet(claude, 1))
    assert found["ANTHROPIC_BASE_URL"] == f"http://{host}"
    assert found["ANTHROPIC_AUTH_TOKEN"] == "$LLMGW_API_KEY"
    assert "This gateway is at http://" in Text(claude).text


async def test_every_tools_snippets_on_the_page_are_code_their_tool_reads(ada):
    pages = {tool: await (await ada.get(f"/connect?tool={tool}&model=qwen")).text()
             for tool in ("python", "javascript", "curl", "continue", "codex", "cline", "claude")}

    compile(snippet(pages["python"], 1), "hello.py", "exec")
    assert tomllib.loads(snippet(pages["codex"], 1))["model"] == "qwen"
    assert yaml.safe_load(snippet(pages["continue"], 1))["models"][0]["model"] == "qwen"
    assert snippet(pages["continue"], 2).startswith("LLMGW_API_KEY=")
    assert "Model ID: qwen" in snippet(pages["cline"], 1)
    assert '"model": "qwen"' in snippet(pages["curl"], 1)
    assert 'model: "qwen"' in snippet(pages["javascript"], 1)


async def test_the_key_picker_fills_the_chosen_keys_prefix_where_the_key_goes(ada, world):
    view, secret = await world.accounts.create_key(ROOT, name="laptop", project="Acme/eng/web", create=True,
                                                   person_email="ada@example.com")

    page = await (await ada.get(f"/connect?tool=cline&key={view['id']}")).text()

    assert f"API Key: {view['prefix']}…" in snippet(page, 1)
    assert "snippet-key" not in Text(page).by_id, "Cline takes the key in its form, not the environment"
    codex = await (await ada.get(f"/connect?tool=codex&key={view['id']}")).text()
    assert Text(codex).by_id["snippet-key"] == f"export LLMGW_API_KEY='{view['prefix']}…'\n"
    assert secret not in page
    assert f"laptop ({view['prefix']}…)" in Text(page).text


async def test_another_persons_key_is_never_offered(ada, world):
    view, _ = await world.accounts.create_key(ROOT, name="bob's", project="Other/ops/infra", create=True,
                                              person_email="bob@example.com")

    page = await (await ada.get(f"/connect?key={view['id']}")).text()

    assert view["prefix"] not in page and "bob's" not in page


async def test_making_a_key_for_a_tool_fills_its_secret_in_once(ada, store, world):
    page = await (await ada.get("/connect?tool=codex")).text()
    made = await ada.post("/connect", data={"_csrf": csrf_of(page), "tool": "codex", "model": "llama",
                                             "project": world.paths["Acme/eng/web"].project.id},
                          allow_redirects=False)

    text = await made.text()
    assert made.status == 201 and made.headers["Cache-Control"] == "no-store"
    (key,) = await store.list_keys(person_id=world.ada["id"])
    secret = Text(text).by_id["secret"]
    assert secret.startswith(key.prefix) and key.name == "Codex CLI"
    assert shlex.split(Text(text).by_id["snippet-key"]) == ["export", f"LLMGW_API_KEY={secret}"]
    assert not [url for url in Text(text).urls if secret in url]
    again = await (await ada.get("/connect?tool=codex")).text()
    assert secret not in again and f"{key.prefix}…" in again


async def test_a_key_for_a_project_not_ones_own_is_refused_on_the_page(ada, store, world):
    page = await (await ada.get("/connect")).text()
    refused = await ada.post("/connect", data={"_csrf": csrf_of(page), "tool": "curl",
                                                "project": world.paths["Acme/eng/api"].project.id})

    assert refused.status == 403
    assert "That project is not one of yours" in Text(await refused.text()).text
    assert await store.list_keys(person_id=world.ada["id"]) == []
    assert re.search(r"<option[^>]*>Acme/eng/web</option>", await refused.text())
