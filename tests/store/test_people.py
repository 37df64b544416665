"""People and their portal sessions."""

from __future__ import annotations

import pytest

from llmgw.store import Conflict, Person, StoreError


def person(n: int, email: str | None = None, **kw) -> Person:
    return Person(id=f"psn_{n}", email=email or f"person{n}@example.com", name=f"Person {n}",
                  created_at=1000.0 + n, **kw)


async def test_a_person_added_is_found_by_id_and_by_email_in_any_case(store):
    ada = Person(id="psn_ada", email="Ada.Lovelace@Example.com", name="Ada", role="admin",
                 password_hash="$argon2id$x", created_at=1700000000.5, disabled=False)
    assert await store.add_person(ada) == ada

    assert await store.person_by_id("psn_ada") == ada
    assert await store.person_by_email("ada.lovelace@example.com") == ada
    assert await store.person_by_email("ADA.LOVELACE@EXAMPLE.COM") == ada
    assert await store.person_by_email("someone@example.com") is None
    assert await store.person_by_id("psn_nobody") is None


async def test_an_email_is_matched_the_same_on_both_dialects_beyond_ascii(store):
    # SQLite's lower() knows only ASCII; people are found by llmgw's own
    # casefolding, so "ÖZGE" finds "özge" on SQLite as on PostgreSQL.
    await store.add_person(person(1, email="özge@örnek.com.tr"))
    found = await store.person_by_email("ÖZGE@ÖRNEK.COM.TR")
    assert found is not None and found.id == "psn_1"


async def test_a_taken_email_is_refused_whatever_its_case(store):
    await store.add_person(person(1, email="grace@example.com"))

    with pytest.raises(Conflict) as refused:
        await store.add_person(person(2, email="Grace@Example.COM"))

    assert "Grace@Example.COM already belongs to someone here" in str(refused.value)
    assert await store.count_people() == 1


async def test_a_taken_id_is_refused_as_a_conflict(store):
    await store.add_person(person(1))
    with pytest.raises(Conflict, match="a person with the id psn_1 already exists"):
        await store.add_person(person(1, email="other@example.com"))


async def test_people_are_listed_by_email_and_counted(store):
    for n, email in ((1, "carol@example.com"), (2, "alice@example.com"), (3, "Bob@example.com")):
        await store.add_person(person(n, email=email, disabled=(n == 3)))

    listed = await store.list_people()

    assert [p.email for p in listed] == ["alice@example.com", "Bob@example.com", "carol@example.com"]
    assert [p.disabled for p in listed] == [False, True, False]
    assert await store.count_people() == 3


async def test_a_person_changed_is_read_back_whole(store):
    await store.add_person(person(1))
    changed = person(1, email="Renamed@example.com", role="operator", password_hash="scrypt$x",
                     disabled=True, locale="tr", must_change_password=True, password_changed_at=2000.5)

    assert await store.update_person(changed) == changed
    assert await store.person_by_id("psn_1") == changed
    assert await store.person_by_email("renamed@example.com") == changed


async def test_a_new_person_has_no_language_and_need_not_change_their_password(store):
    await store.add_person(person(1))
    found = await store.person_by_id("psn_1")
    assert found is not None
    assert (found.locale, found.must_change_password, found.password_changed_at) == (None, False, None)


async def test_changing_a_person_to_another_persons_email_is_refused(store):
    await store.add_person(person(1, email="ada@example.com"))
    await store.add_person(person(2, email="grace@example.com"))

    with pytest.raises(Conflict, match="ADA@example.com already belongs to someone here"):
        await store.update_person(person(2, email="ADA@example.com"))


async def test_changing_nobody_is_refused_with_a_sentence(store):
    with pytest.raises(StoreError, match="there is no person with the id psn_9 to change"):
        await store.update_person(person(9))
