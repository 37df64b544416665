"""The chat page's credential on /v1: a session's person in one of their projects, cached (a fake clock)."""

from __future__ import annotations

import pytest

from llmgw.account import AccountError, Accounts, Actor, ChatTokens, Sessions
from llmgw.config import AuthSettings
from llmgw.store import Limits

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
TTL = 5.0
IDLE = float(AuthSettings().session_idle)  # 2 h
MAX = float(AuthSettings().session_max)  # 12 h


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def world(store, clock):
    """Ada, a member of Acme/ml/chat and Acme/ml/code, signed in; ChatTokens on the same store and clock."""
    accounts = Accounts(store)
    for project in ("chat", "code", "secret"):
        await store.ensure_project("Acme", "ml", project)
    view, _ = await accounts.people.add(ROOT, email="ada@example.com", name="Ada", password=PASSWORD,
                                        member_of=["project:Acme/ml/code", "project:Acme/ml/chat"])
    sessions = Sessions(store, lambda: AuthSettings(), clock=clock)
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address="192.0.2.7")
    chat = ChatTokens(store, lambda: TTL, clock=clock)
    return accounts, sessions, signed, chat, view["id"]


async def test_a_live_sessions_credential_acts_as_a_key_of_the_person_in_their_first_project(world, store):
    _, _, signed, chat, ada = world
    chat_project = await store.project_by_path("Acme", "ml", "chat")
    await store.put_limits(Limits("project", chat_project.project.id, rpm=7))

    principal = await chat.lookup(signed.chat_token, None)

    assert principal is not None
    assert (principal.key.id, principal.key.name, principal.key.person_id) == (f"chat_{ada}", "portal chat", ada)
    assert str(principal.path) == "Acme/ml/chat"  # the first of Ada's projects by path: chat before code
    assert principal.limits.rpm == 7 and principal.limits.rpm_from == "project"
    assert principal.refusal(1e12) is None  # no key of its own to expire: the session's end is what counts


async def test_the_project_header_picks_one_of_the_persons_projects_by_id_or_by_path(world, store):
    _, _, signed, chat, _ = world
    code = await store.project_by_path("Acme", "ml", "code")

    by_id = await chat.lookup(signed.chat_token, code.project.id)
    by_path = await chat.lookup(signed.chat_token, "Acme/ml/code")

    assert by_id is not None and by_path is not None
    assert by_id.path.project.id == by_path.path.project.id == code.project.id


async def test_a_project_that_is_not_the_persons_is_refused_with_403_and_a_sentence(world, store):
    _, _, signed, chat, _ = world
    secret = await store.project_by_path("Acme", "ml", "secret")

    for wanted in (secret.project.id, "Acme/ml/secret", "prj_nothing"):
        with pytest.raises(AccountError) as refused:
            await chat.lookup(signed.chat_token, wanted)
        assert refused.value.status == 403 and refused.value.code == "forbidden"
        assert str(refused.value) == (f"you are not a member of the project {wanted}; "
                                      "choose one of your own projects")
        assert signed.chat_token not in str(refused.value)


async def test_a_person_in_no_project_is_told_to_ask_for_one(store, clock):
    accounts = Accounts(store)
    await accounts.people.add(ROOT, email="bo@example.com", name="Bo", password=PASSWORD)
    signed = await Sessions(store, lambda: AuthSettings(), clock=clock).sign_in(
        "bo@example.com", PASSWORD, address="192.0.2.7")

    with pytest.raises(AccountError) as refused:
        await ChatTokens(store, lambda: TTL, clock=clock).lookup(signed.chat_token, None)

    assert refused.value.status == 403 and "ask an administrator to add you" in str(refused.value)


async def test_an_unknown_credential_or_an_api_key_is_no_one(world):
    _, _, signed, chat, _ = world

    assert await chat.lookup("llmgw-chat-" + "A" * 43, None) is None
    assert await chat.lookup("sk-llmgw-" + "a" * 40, None) is None
    assert await chat.lookup(signed.chat_token[:-1], None) is None


async def test_a_signed_out_session_is_refused_once_the_cache_ttl_has_passed(world, clock):
    _, sessions, signed, chat, _ = world
    assert await chat.lookup(signed.chat_token, None) is not None

    await sessions.sign_out(signed.token)
    clock.advance(TTL - 1)
    assert await chat.lookup(signed.chat_token, None) is not None  # still in memory, as a revoked key would be
    clock.advance(1)

    assert await chat.lookup(signed.chat_token, None) is None


async def test_a_suspended_persons_credential_is_refused_within_the_cache_ttl(world, clock):
    accounts, _, signed, chat, _ = world
    assert await chat.lookup(signed.chat_token, None) is not None

    await accounts.people.suspend(ROOT, "ada@example.com")
    clock.advance(TTL)

    assert await chat.lookup(signed.chat_token, None) is None


async def test_leaving_a_project_takes_it_away_from_chat_within_the_cache_ttl(world, clock):
    accounts, _, signed, chat, _ = world
    assert await chat.lookup(signed.chat_token, "Acme/ml/code") is not None

    await accounts.people.leave(ROOT, "ada@example.com", "project:Acme/ml/code")
    clock.advance(TTL)

    with pytest.raises(AccountError):
        await chat.lookup(signed.chat_token, "Acme/ml/code")


async def test_a_run_made_with_the_credential_runs_as_the_person_in_its_project_while_they_are_its_member(
        world, store):
    accounts, sessions, signed, chat, ada = world
    code = await store.project_by_path("Acme", "ml", "code")
    secret = await store.project_by_path("Acme", "ml", "secret")
    await sessions.sign_out(signed.token)  # a run outlives the page that made it: the session is not asked

    principal = await chat.for_work(ada, code.project.id)

    assert principal is not None and principal.key.id == f"chat_{ada}" and str(principal.path) == "Acme/ml/code"
    assert await chat.for_work(ada, secret.project.id) is None  # not hers
    await accounts.people.leave(ROOT, "ada@example.com", "project:Acme/ml/code")
    assert await chat.for_work(ada, code.project.id) is None
    await accounts.people.suspend(ROOT, "ada@example.com")
    assert await chat.for_work(ada, (await store.project_by_path("Acme", "ml", "chat")).project.id) is None
    assert await chat.for_work("psn_nobody", code.project.id) is None


async def test_a_session_left_idle_ends_its_credential_as_it_ends_the_cookie(world, clock):
    _, sessions, signed, chat, _ = world
    assert await chat.lookup(signed.chat_token, None) is not None

    clock.advance(IDLE)

    assert await chat.lookup(signed.chat_token, None) is None
    assert await sessions.current(signed.token) is None


async def test_chatting_keeps_the_session_alive_until_its_absolute_end(world, clock):
    _, sessions, signed, chat, _ = world
    used = 0.0
    while used + 1800 < MAX:
        assert await chat.lookup(signed.chat_token, None) is not None, f"refused after {used / 3600:g} h of chat"
        clock.advance(1800)
        used += 1800
    assert await sessions.current(signed.token) is not None  # the cookie's session lives on as well

    clock.advance(MAX - used)

    assert await chat.lookup(signed.chat_token, None) is None


async def test_pages_used_since_the_credential_was_cached_keep_it_from_looking_idle(world, clock):
    _, sessions, signed, chat, _ = world
    long_ttl = ChatTokens(chat.store, lambda: IDLE * 2, clock=clock)
    assert await long_ttl.lookup(signed.chat_token, None) is not None

    clock.advance(IDLE - 60)
    assert await sessions.current(signed.token) is not None  # a page view touches the session in the store
    clock.advance(120)

    assert await long_ttl.lookup(signed.chat_token, None) is not None


async def test_a_cached_credential_costs_no_store_read_and_neither_does_a_remembered_unknown_one(world):
    _, _, signed, chat, _ = world
    unknown = "llmgw-chat-" + "B" * 43
    await chat.lookup(signed.chat_token, None)
    await chat.lookup(unknown, None)
    reads = chat.store_reads

    for _ in range(5):
        await chat.lookup(signed.chat_token, None)
        await chat.lookup(unknown, None)

    assert chat.store_reads == reads
    assert chat.remembers(signed.chat_token) and chat.remembers(unknown)
    assert not chat.remembers("llmgw-chat-" + "C" * 43)


async def test_credentials_of_closed_browsers_do_not_pile_up_in_memory(world, clock, monkeypatch):
    _, sessions, signed, chat, _ = world
    monkeypatch.setattr("llmgw.account.chattokens.MAX_KNOWN", 2)
    others = [await sessions.sign_in("ada@example.com", PASSWORD, address="192.0.2.7") for _ in range(3)]
    for one in others:
        assert await chat.lookup(one.chat_token, None) is not None
    clock.advance(TTL)

    assert await chat.lookup(signed.chat_token, None) is not None

    assert len(chat._known) <= 2 and chat.remembers(signed.chat_token)


async def test_a_batch_or_run_made_with_the_credential_is_done_as_its_person_while_they_may(world, store):
    from types import SimpleNamespace

    from llmgw.router.batches.runner import principal_for_work

    accounts, sessions, signed, chat, ada = world
    code = await store.project_by_path("Acme", "ml", "code")
    # What a leader's runner reads of its control plane: the store, and the credentials' lookup.
    plane = SimpleNamespace(store=store, chat=chat)
    await sessions.sign_out(signed.token)

    who = await principal_for_work(plane, f"chat_{ada}", code.project.id)
    assert who is not None and who.key.person_id == ada and str(who.path) == "Acme/ml/code"
    await accounts.people.suspend(ROOT, "ada@example.com")
    assert await principal_for_work(plane, f"chat_{ada}", code.project.id) is None
    assert await principal_for_work(plane, "key_0123456789abcdef", code.project.id) is None  # a key gone
