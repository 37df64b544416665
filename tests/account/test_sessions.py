"""Signing in to the portal: sessions, their timeouts, and the throttle on guessing (a fake clock)."""

from __future__ import annotations

import pytest

from llmgw.account import CHAT_PREFIX, AccountError, Accounts, Actor, Sessions
from llmgw.account.sessions import chat_digest, session_id
from llmgw.config import AuthSettings, Duration

ROOT = Actor("root", "cli")
PASSWORD = "correct horse battery"
ADDRESS = "192.0.2.7"


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
def sessions(store, clock) -> Sessions:
    return Sessions(store, lambda: AuthSettings(), clock=clock)


@pytest.fixture
async def ada(store):
    view, _ = await Accounts(store).people.add(ROOT, email="ada@example.com", name="Ada", password=PASSWORD)
    return view


async def test_signing_in_gives_a_new_token_whose_hash_alone_is_stored(sessions, store, ada):
    first = await sessions.sign_in("Ada@Example.com", PASSWORD, address=ADDRESS, agent="Firefox")
    second = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    assert first.token != second.token and first.session.id != second.session.id
    assert first.session.id == session_id(first.token) != first.token
    assert first.chat_token.startswith(CHAT_PREFIX) and first.csrf not in (first.token, first.chat_token)
    assert await store.session_by_chat_digest(chat_digest(first.chat_token)) == first.session
    assert first.session.expires_at == first.session.created_at + 12 * 3600
    assert (first.session.address, first.session.agent) == (ADDRESS, "Firefox")
    current = await sessions.current(first.token)
    assert current is not None and current.person.id == ada["id"]
    assert (current.csrf, current.chat_token) == (first.csrf, first.chat_token)


async def test_an_unknown_email_and_a_wrong_password_get_the_same_sentence(sessions, ada):
    with pytest.raises(AccountError) as unknown:
        await sessions.sign_in("nobody@example.com", PASSWORD, address=ADDRESS)
    with pytest.raises(AccountError) as wrong:
        await sessions.sign_in("ada@example.com", "not the password", address=ADDRESS)

    assert str(unknown.value) == str(wrong.value) == "that e-mail and password do not match an account here"
    assert unknown.value.status == wrong.value.status == 401


async def test_a_session_unused_for_two_hours_ends(sessions, clock, ada):
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    clock.advance(2 * 3600 - 1)
    assert await sessions.current(signed.token) is not None  # and this use keeps it alive
    clock.advance(2 * 3600 - 1)
    assert await sessions.current(signed.token) is not None
    clock.advance(2 * 3600)
    assert await sessions.current(signed.token) is None


async def test_a_busy_session_still_ends_twelve_hours_after_sign_in(sessions, clock, ada):
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    for _ in range(11):
        clock.advance(3600)
        assert await sessions.current(signed.token) is not None
    clock.advance(3600)
    assert await sessions.current(signed.token) is None


async def test_a_page_touches_the_session_at_most_once_a_minute(sessions, clock, store, ada):
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    clock.advance(30)
    await sessions.current(signed.token)
    assert (await store.session_by_id(signed.session.id)).last_seen_at == signed.session.created_at
    clock.advance(31)
    await sessions.current(signed.token)
    assert (await store.session_by_id(signed.session.id)).last_seen_at == clock.now


async def test_signing_out_ends_this_session_and_everywhere_ends_them_all(sessions, ada):
    laptop = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    phone = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    tablet = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    await sessions.sign_out(laptop.token)
    assert await sessions.current(laptop.token) is None
    assert await sessions.current(phone.token) is not None

    await sessions.sign_out(phone.token, everywhere=True)
    assert await sessions.current(tablet.token) is None
    await sessions.sign_out(phone.token)  # signing out twice is not an error


async def test_a_suspended_person_cannot_sign_in_and_their_session_ends(sessions, store, ada):
    await Accounts(store).people.add(ROOT, email="root@example.com", name="Root", role="admin", password=PASSWORD)
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    await Accounts(store).people.suspend(ROOT, "ada@example.com")

    assert await sessions.current(signed.token) is None
    with pytest.raises(AccountError) as right:
        await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    with pytest.raises(AccountError) as wrong:
        await sessions.sign_in("ada@example.com", "not the password", address=ADDRESS)
    # The same answer either way: a different one to the right password would confirm a guess.
    assert (right.value.status, str(right.value)) == (wrong.value.status, str(wrong.value)) == (
        401, "that e-mail and password do not match an account here")
    assert await store.sign_in_failures("account:ada@example.com", 0) == 2


async def test_the_eleventh_try_at_one_account_is_refused_even_with_the_right_password(sessions, clock, ada):
    for n in range(10):
        with pytest.raises(AccountError) as wrong:
            await sessions.sign_in("ada@example.com", f"guess number {n}", address=f"198.51.100.{n}")
        assert wrong.value.status == 401

    with pytest.raises(AccountError, match="too many failed sign-ins; wait 15 minutes") as throttled:
        await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    assert (throttled.value.status, throttled.value.code) == (429, "rate_limited")

    clock.advance(15 * 60 + 1)
    assert (await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)).person.id == ada["id"]


async def test_the_fifty_first_try_from_one_address_is_refused_whatever_the_account(sessions, clock, store, ada):
    # Fifty failures of fifty accounts from one address, as a guesser spreading out would leave.
    for n in range(50):
        await store.add_sign_in_failure([f"account:user{n}@example.com", f"address:{ADDRESS}"], clock.now)

    with pytest.raises(AccountError, match="too many failed sign-ins") as throttled:
        await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    assert throttled.value.status == 429
    assert (await sessions.sign_in("ada@example.com", PASSWORD, address="203.0.113.9")).person.id == ada["id"]


async def test_a_success_forgets_the_accounts_earlier_failures(sessions, store, ada):
    with pytest.raises(AccountError):
        await sessions.sign_in("ada@example.com", "a wrong one", address=ADDRESS)
    await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    assert await store.sign_in_failures("account:ada@example.com", since=0.0) == 0
    assert await store.sign_in_failures(f"address:{ADDRESS}", since=0.0) == 1


async def test_shorter_settings_apply_to_the_next_sign_in(store, clock, ada):
    sessions = Sessions(store, lambda: AuthSettings(session_idle=Duration("10m"), session_max=Duration("1h")),
                        clock=clock)
    signed = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)
    assert signed.session.expires_at == clock.now + 3600
    clock.advance(600)
    assert await sessions.current(signed.token) is None


async def test_a_new_sign_in_forgets_the_persons_sessions_that_ended_unseen(sessions, clock, store, ada):
    await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)  # a browser closed, never signed out
    clock.advance(3 * 3600)
    fresh = await sessions.sign_in("ada@example.com", PASSWORD, address=ADDRESS)

    assert [s.id for s in await store.list_sessions(ada["id"])] == [fresh.session.id]
