"""The portal's chat credential on /v1, against a real `llmgw server` and sim-engine: a key in all but name.

A signed-in person's chat page sends `llmgw-chat-…`. The gateway must rate-limit, budget and guard
it as it does a key, count its usage under the person, refuse it once its session ends, keep it to
the person's own projects, and never write it anywhere.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

from llmgw.account import Accounts, Actor, Sessions
from llmgw.config import AuthSettings
from llmgw.store import Store, Usage, open_store
from tests.support.servers import Server, SimEngine, write_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
CHAT = [{"role": "user", "content": "Say something."}]
PROJECTS = ("Acme/ml/chat", "Acme/ml/limited", "Acme/ml/paid")  # Ada's; the first by path is her default


def on_store(server: Server, work):
    """Run `work(store)` against the server's own store, from this (synchronous) test."""
    async def run():
        store = await open_store(server.store)
        try:
            return await work(store)
        finally:
            await store.close()
    return asyncio.run(run())


def sign_in(server: Server, email: str = "ada@example.com") -> tuple[str, str]:
    """(the cookie's token, the chat credential) of a new session, as the portal's sign-in makes them."""
    async def work(store: Store):
        signed = await Sessions(store, lambda: AuthSettings()).sign_in(email, PASSWORD, address="127.0.0.1")
        return signed.token, signed.chat_token
    return on_store(server, work)


def sign_out(server: Server, token: str) -> None:
    on_store(server, lambda store: Sessions(store, lambda: AuthSettings()).sign_out(token))


def usage_of(server: Server, key_id: str, count: int) -> list[Usage]:
    """The key's usage rows once `count` are written (the router writes them in batches)."""
    def rows():
        got = on_store(server, lambda store: store.recent_usage(100, key_id=key_id))
        return got if len(got) >= count else None
    return wait_until(rows, timeout=15, what=f"{count} usage rows of {key_id}", interval=0.2)


def post(server: Server, secret: str, body: dict, project: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    if project:
        headers["x-llmgw-project"] = project
    request = urllib.request.Request(server.client_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(project: str | None = None, content: str = "Say something.") -> dict:
    return {"model": "qwen", "messages": [{"role": "user", "content": content}], "max_tokens": 10}


def assert_never_written(server: Server, secret: str) -> None:
    """The credential is in no line of the server's log and no usage row."""
    assert secret not in server.output()
    rows = on_store(server, lambda store: store.recent_usage(1000))
    assert all(secret not in json.dumps([r.key_id, r.detail]) for r in rows)


@pytest.fixture
def gateway(tmp_path):
    """gateway(workers=1) -> a running server (priced sim model `qwen`) where Ada, member of PROJECTS, is
    signed in: `.ada` is her id, `.chat` her chat credential, `.token` her session's cookie token."""
    made: list[Server | SimEngine] = []

    def make(workers: int = 1) -> Server:
        engine = SimEngine(tmp_path, "qwen").start()
        made.append(engine)
        # 1,000,000 micro-units (1.00) a thousand answer tokens: each 10-token answer costs 0.01.
        config = write_config(tmp_path / "gw.yaml", {"workers": workers, "models": [
            {"name": "qwen", "endpoints": [engine.url], "price": {"completion_per_1k": 1_000_000}}]})
        server = Server(tmp_path, "gw", config=config)
        made.append(server)
        done = server.init("--json")
        assert done.returncode == 0, done.stderr

        async def people(store: Store) -> str:
            for path in (*PROJECTS, "Acme/ml/secret"):
                await store.ensure_project(*path.split("/"))
            view, _ = await Accounts(store).people.add(
                ROOT, email="ada@example.com", name="Ada", password=PASSWORD,
                member_of=[f"project:{p}" for p in PROJECTS])
            return view["id"]

        server.ada = on_store(server, people)
        server.start()
        server.token, server.chat = sign_in(server)
        return server

    yield make
    for thing in reversed(made):
        thing.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_openai_sdk_streams_an_answer_with_a_chat_credential_counted_under_the_person(gateway, workers):
    gw = gateway(workers)
    client = openai.OpenAI(api_key=gw.chat, base_url=gw.client_url + "/v1", max_retries=0)

    stream = client.chat.completions.create(model="qwen", messages=CHAT, max_tokens=10, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    listed = [m.id for m in client.models.list()]

    assert text.strip() and listed == ["qwen"]
    [row] = usage_of(gw, f"chat_{gw.ada}", 1)
    assert (row.person_id, row.status, row.model) == (gw.ada, 200, "qwen")
    chat_project = on_store(gw, lambda store: store.project_by_path("Acme", "ml", "chat"))
    assert row.project_id == chat_project.project.id  # no header: her first project by path
    assert_never_written(gw, gw.chat)


def test_anthropics_sdk_sends_the_chat_credential_as_x_api_key_and_is_answered(gateway):
    gw = gateway()
    claude = anthropic.Anthropic(api_key=gw.chat, base_url=gw.client_url, max_retries=0)

    answer = claude.messages.create(model="qwen", max_tokens=10, messages=CHAT)

    assert answer.content[0].text.strip()
    assert usage_of(gw, f"chat_{gw.ada}", 1)[0].person_id == gw.ada


def test_a_chat_credential_is_rate_limited_by_its_projects_requests_a_minute(gateway):
    gw = gateway()
    gw.ctl_json("keys", "limits", "--scope", "project", "--id", "Acme/ml/limited", "--rpm", "2")

    answers = [post(gw, gw.chat, ask(), project="Acme/ml/limited") for _ in range(3)]

    assert [status for status, _ in answers] == [200, 200, 429]
    refused = answers[-1][1]["error"]
    assert refused["code"] == "rate_limited" and "the project Acme/ml/limited" in refused["message"]
    assert post(gw, gw.chat, ask(), project="Acme/ml/chat")[0] == 200  # her other project is not held back


def test_a_chat_credential_is_charged_to_its_projects_budget_and_refused_past_it(gateway):
    gw = gateway()
    gw.ctl_json("keys", "limits", "--scope", "project", "--id", "Acme/ml/paid", "--budget", "0.02",
                "--period", "day")

    answers = [post(gw, gw.chat, ask(), project="Acme/ml/paid") for _ in range(3)]

    assert [status for status, _ in answers] == [200, 200, 402]
    refused = answers[-1][1]["error"]
    assert refused["code"] == "budget_exceeded" and "the project Acme/ml/paid" in refused["message"]


def test_a_chat_credential_is_guarded_like_a_key_and_the_decision_is_in_its_usage_row(gateway):
    gw = gateway()
    token = "ghp_" + "x7Kq2LmN9pRt4VwY8zAb3CdEf6GhJk1MnP5s"

    status, body = post(gw, gw.chat, ask(content=f"my token is {token}"))

    assert status == 400 and body["error"]["code"] == "guardrail_blocked"
    [row] = usage_of(gw, f"chat_{gw.ada}", 1)
    assert row.person_id == gw.ada and row.model == "qwen"
    assert row.detail["error"] == "guardrail_blocked"
    assert row.detail["guard"] == [{"rule": "secrets:github", "action": "block", "direction": "input"}]
    assert token not in json.dumps(row.detail)
    assert_never_written(gw, gw.chat)


def test_the_credential_of_an_ended_session_gets_401(gateway):
    gw = gateway()
    token, chat = sign_in(gw)
    sign_out(gw, token)

    status, body = post(gw, chat, ask())

    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert body["error"]["message"] == ("this chat credential's session has ended; reload the chat page, "
                                        "signing in again if asked")
    assert chat not in json.dumps(body)
    # One in use is remembered for auth.cache_ttl (5 s), as a revoked key is, then refused too.
    assert post(gw, gw.chat, ask())[0] == 200
    sign_out(gw, gw.token)
    wait_until(lambda: post(gw, gw.chat, ask())[0] == 401, timeout=15, what="the signed-out credential refused",
               interval=0.5)
    assert_never_written(gw, gw.chat)


def test_a_project_that_is_not_the_persons_gets_403_with_a_sentence(gateway):
    gw = gateway()

    status, body = post(gw, gw.chat, ask(), project="Acme/ml/secret")

    assert status == 403 and body["error"]["code"] == "forbidden"
    assert body["error"]["message"] == ("you are not a member of the project Acme/ml/secret; "
                                        "choose one of your own projects")
    assert_never_written(gw, gw.chat)


def test_made_up_chat_credentials_share_the_unknown_key_throttle_and_a_valid_one_still_passes(gateway):
    gw = gateway()
    made_up = [f"llmgw-chat-{n:043d}" for n in range(21)]  # auth.unknown_key_rate is 20 a minute

    answers = [post(gw, secret, ask()) for secret in made_up]

    assert [status for status, _ in answers[:20]] == [401] * 20
    assert answers[20][0] == 429 and answers[20][1]["error"]["code"] == "too_many_unknown_keys"
    assert post(gw, gw.chat, ask())[0] == 200  # a guesser at the same address locks out no one
