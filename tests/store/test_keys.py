"""API keys: kept by the sha256 of their secret, revoked once."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from llmgw.store import ApiKey, Conflict, Person, StoreError


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@pytest.fixture
async def project(store):
    return (await store.ensure_project("acme", "research", "chatbot")).project


def key(project, n: int, secret: str | None = None, **kw) -> ApiKey:
    secret = secret or f"sk-llmgw-secret-{n}"
    return ApiKey(id=f"key_{n}", name=f"key {n}", project_id=project.id, digest=digest(secret),
                  prefix=secret[:12], created_at=1000.0 + n, **kw)


async def test_a_key_is_found_by_the_digest_of_its_secret_and_by_id(store, project):
    await store.add_person(Person(id="psn_1", email="a@example.com", name="A"))
    added = key(project, 1, person_id="psn_1", band="gold", expires_at=5000.0)
    assert await store.add_key(added) == added

    found = await store.key_by_digest(digest("sk-llmgw-secret-1"))
    assert found == added
    assert isinstance(found.digest, bytes) and len(found.digest) == 32
    assert await store.key_by_id("key_1") == added
    assert await store.key_by_digest(digest("not a key")) is None
    assert await store.key_by_id("key_nope") is None


async def test_a_second_key_with_the_same_secret_is_refused(store, project):
    await store.add_key(key(project, 1, secret="sk-llmgw-same"))

    with pytest.raises(Conflict, match="another API key already has the secret of sk-llmgw-sam"):
        await store.add_key(key(project, 2, secret="sk-llmgw-same"))
    assert [k.id for k in await store.list_keys()] == ["key_1"]


async def test_a_key_for_a_project_that_does_not_exist_is_refused_with_a_sentence(store):
    orphan = ApiKey(id="key_1", name="ci", project_id="prj_nope", digest=digest("x"), prefix="sk-x")
    with pytest.raises(StoreError, match="there is no project with the id prj_nope to hold the key ci"):
        await store.add_key(orphan)


async def test_keys_are_listed_oldest_first_for_all_or_one_project(store, project):
    other = (await store.ensure_project("acme", "research", "search")).project
    await store.add_key(key(project, 2))
    await store.add_key(key(other, 3))
    await store.add_key(key(project, 1))

    assert [k.id for k in await store.list_keys()] == ["key_1", "key_2", "key_3"]
    assert [k.id for k in await store.list_keys(project.id)] == ["key_1", "key_2"]
    assert [k.id for k in await store.list_keys(other.id)] == ["key_3"]


async def test_revoking_a_key_twice_keeps_the_first_revocation_time(store, project):
    await store.add_key(key(project, 1))

    first = await store.revoke_key("key_1", at=2000.0)
    second = await store.revoke_key("key_1", at=3000.0)

    assert first.revoked_at == 2000.0
    assert second.revoked_at == 2000.0
    assert (await store.key_by_digest(digest("sk-llmgw-secret-1"))).revoked_at == 2000.0


async def test_revoking_a_key_that_does_not_exist_returns_none(store):
    assert await store.revoke_key("key_nope", at=1.0) is None


async def test_a_key_read_for_use_says_whether_its_person_is_suspended(store, project):
    person = await store.add_person(Person(id="psn_2", email="b@example.com", name="B"))
    await store.add_key(key(project, 2, person_id="psn_2"))
    await store.add_key(key(project, 3))  # a key of no person
    assert not (await store.key_by_digest(digest("sk-llmgw-secret-2"))).owner_suspended

    await store.update_person(replace(person, disabled=True))

    assert (await store.key_by_digest(digest("sk-llmgw-secret-2"))).owner_suspended
    assert (await store.key_by_id("key_2")).owner_suspended
    assert not (await store.key_by_digest(digest("sk-llmgw-secret-3"))).owner_suspended
