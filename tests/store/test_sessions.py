"""Portal sessions in the store: found by id or by their chat credential, touched, ended."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Person, Session, StoreError


async def add_people(store, *ids: str) -> None:
    for n, pid in enumerate(ids):
        await store.add_person(Person(id=pid, email=f"{pid}@example.com", name=pid, created_at=float(n)))


def session(n: int, person_id: str = "psn_1", **kw) -> Session:
    fields = dict(id=f"{n:064x}", person_id=person_id, created_at=100.0 + n, last_seen_at=100.0 + n,
                  expires_at=1000.0 + n, chat_digest=bytes([n]) * 32)
    fields.update(kw)
    return Session(**fields)


async def test_a_session_is_found_by_id_and_by_its_chat_credential(store):
    await add_people(store, "psn_1")
    signed_in = session(1, address="192.0.2.7", agent="Firefox")
    await store.add_session(signed_in)

    assert await store.session_by_id(signed_in.id) == signed_in
    assert await store.session_by_chat_digest(bytes([1]) * 32) == signed_in
    assert await store.session_by_chat_digest(bytes([2]) * 32) is None


async def test_touching_a_session_moves_its_last_seen_time_only_forwards(store):
    await add_people(store, "psn_1")
    await store.add_session(session(1))

    await store.touch_session(session(1).id, 500.0)
    await store.touch_session(session(1).id, 300.0)  # a late request of the same browser

    found = await store.session_by_id(session(1).id)
    assert found is not None and found.last_seen_at == 500.0


async def test_signing_out_everywhere_else_keeps_only_this_session(store):
    await add_people(store, "psn_1", "psn_2")
    for n in (1, 2, 3):
        await store.add_session(session(n))
    await store.add_session(session(4, person_id="psn_2"))

    assert await store.delete_sessions("psn_1", keep=session(2).id) == 2

    assert [s.id for s in await store.list_sessions("psn_1")] == [session(2).id]
    assert len(await store.list_sessions("psn_2")) == 1
    assert await store.delete_sessions("psn_1") == 1
    assert await store.list_sessions("psn_1") == []


async def test_sessions_are_listed_last_seen_first(store):
    await add_people(store, "psn_1")
    await store.add_session(session(1, last_seen_at=300.0))
    await store.add_session(session(2, last_seen_at=200.0))
    await store.add_session(session(3, last_seen_at=400.0))

    assert [s.id for s in await store.list_sessions("psn_1")] == [session(n).id for n in (3, 1, 2)]


async def test_two_sessions_cannot_share_a_chat_credential(store):
    await add_people(store, "psn_1")
    await store.add_session(session(1))
    with pytest.raises(Conflict, match="that session already exists"):
        await store.add_session(session(2, chat_digest=bytes([1]) * 32))


async def test_a_session_for_nobody_is_refused_with_a_sentence(store):
    with pytest.raises(StoreError, match="there is no person with the id psn_ghost to sign in"):
        await store.add_session(session(1, person_id="psn_ghost"))


async def test_failed_sign_ins_are_counted_per_subject_within_the_window(store):
    await store.add_sign_in_failure(["account:ada@example.com", "address:192.0.2.7"], 1000.0)
    await store.add_sign_in_failure(["account:ada@example.com", "address:192.0.2.7"], 1100.0)
    await store.add_sign_in_failure(["account:bob@example.com", "address:192.0.2.7"], 1200.0)

    assert await store.sign_in_failures("account:ada@example.com", since=1000.0) == 2
    assert await store.sign_in_failures("account:ada@example.com", since=1050.0) == 1
    assert await store.sign_in_failures("address:192.0.2.7", since=0.0) == 3

    await store.clear_sign_in_failures("account:ada@example.com")
    assert await store.sign_in_failures("account:ada@example.com", since=0.0) == 0
    assert await store.sign_in_failures("address:192.0.2.7", since=0.0) == 3


async def test_failed_sign_ins_older_than_a_day_are_forgotten_on_the_next_write(store):
    await store.add_sign_in_failure(["address:192.0.2.7"], 1000.0)
    await store.add_sign_in_failure(["address:198.51.100.1"], 1000.0 + 86400.0 + 1)

    assert await store.sign_in_failures("address:192.0.2.7", since=0.0) == 0


async def test_a_sign_in_state_is_spent_once_and_forgotten_after_its_flow_would_have_expired(store):
    assert await store.spend_sign_in("digest-a", at=1000.0, until=1660.0) is True
    assert await store.spend_sign_in("digest-a", at=1001.0, until=1661.0) is False  # a replay, on any plane
    assert await store.spend_sign_in("digest-b", at=1002.0, until=1662.0) is True

    # Past its `until` it is forgotten (a flow that old is refused by its cookie's age anyway).
    assert await store.spend_sign_in("digest-c", at=1700.0, until=2360.0) is True
    assert await store.spend_sign_in("digest-a", at=1701.0, until=2361.0) is True
