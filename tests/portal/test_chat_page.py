"""The /chat page as the server writes it (in process, real store, both dialects): which projects and
models it offers, and where the chat credential goes. What the browser does with it is
test_chat_browser.py's."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.account import Accounts, Actor, ChatTokens
from llmgw.account.sessions import chat_digest
from llmgw.config import ClusterSettings, ServerConfig
from llmgw.events import Events
from llmgw.portal import mount
from llmgw.store import Limits

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"


def _model(*can: str) -> SimpleNamespace:
    return SimpleNamespace(settings=SimpleNamespace(can=can))


class Plane:
    """What the chat page reads of the process serving it: the store, settings, chat credentials, models."""

    def __init__(self, store):
        self.store = store
        self.settings = SimpleNamespace(current=ClusterSettings())
        self.cfg = ServerConfig()  # data_dir: where sign-in's master key would be; these pages read none
        self.chat = ChatTokens(store, lambda: 5.0)
        self.router = SimpleNamespace(registry=SimpleNamespace(models={
            "qwen": _model("chat", "completions"), "llama": _model("chat"), "embed": _model("embeddings")}),
            events=Events())


@pytest.fixture
async def client(store):
    accounts = Accounts(store)
    for project in ("chat", "narrow"):
        await store.ensure_project("Acme", "ml", project)
    await store.ensure_project("Other", "x", "y")
    narrow = await store.project_by_path("Acme", "ml", "narrow")
    await store.put_limits(Limits("project", narrow.project.id, models=["llama"]))
    await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password=PASSWORD,
                              member_of=["team:Acme/ml"])
    await accounts.people.add(ROOT, email="bo@example.com", name="Bo", password=PASSWORD)
    app = web.Application()
    mount(app, Plane(store))
    async with TestClient(TestServer(app)) as c:
        yield c


async def _sign_in(client, email: str) -> None:
    page = await (await client.get("/signin")).text()
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    signed = await client.post("/signin", data={"_csrf": csrf, "email": email, "password": PASSWORD},
                               allow_redirects=False)
    assert signed.status == 303


def _options(page: str, select: str) -> list[str]:
    block = re.search(rf'<select id="{select}"[^>]*>(.*?)</select>', page, re.S).group(1)
    return [html.unescape(o) for o in re.findall(r"<option[^>]*>([^<]*)</option>", block)]


async def test_the_page_offers_the_persons_projects_and_the_chat_models_the_first_one_allows(client):
    await _sign_in(client, "ada@example.com")

    answer = await client.get("/chat")
    page = await answer.text()

    assert answer.status == 200 and answer.headers["Cache-Control"] == "no-store"
    assert _options(page, "chat-project") == ["Acme/ml/chat", "Acme/ml/narrow"]  # her team's, not Other's
    assert _options(page, "chat-model") == ["llama", "qwen"]  # chat models only: no embeddings


async def test_choosing_a_project_offers_only_the_models_its_limits_allow(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/chat?project=Acme/ml/narrow")).text()

    assert _options(page, "chat-model") == ["llama"]
    assert re.search(r'<option value="prj_[^"]+" selected>Acme/ml/narrow</option>', page)


async def test_the_chat_credential_is_the_sessions_own_and_sits_only_in_a_data_attribute(client, store):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/chat")).text()

    token = re.search(r'data-token="([^"]+)"', page).group(1)
    assert token.startswith("llmgw-chat-") and page.count(token) == 1
    assert await store.session_by_chat_digest(chat_digest(token)) is not None


async def test_a_person_in_no_project_is_told_to_ask_for_one_and_gets_no_chat_form(client):
    await _sign_in(client, "bo@example.com")

    page = await (await client.get("/chat")).text()

    assert "You are not a member of any project, so there is nowhere to chat." in page
    assert 'id="chat-form"' not in page and "chat.js" not in page


async def test_a_signed_out_browser_is_sent_to_sign_in_first(client):
    answer = await client.get("/chat", allow_redirects=False)

    assert answer.status == 303 and answer.headers["Location"] == "/signin?next=/chat"


async def test_a_turkish_reader_gets_the_page_and_its_refusal_sentences_in_turkish(client):
    await _sign_in(client, "ada@example.com")

    page = await (await client.get("/chat", headers={"Accept-Language": "tr-TR,tr;q=0.9"})).text()

    assert "<h1>Sohbet</h1>" in page
    assert ('data-error-guardrail-blocked="Bir koruma kuralı bu mesajı durdurdu (kural {rule}). '
            'Kuralın ilgilendiği kısmı çıkarıp yeniden gönderin."') in page
