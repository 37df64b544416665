"""A request's usage row names the person whose key sent it, so the portal can show people their own days."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from llmgw.config.keyfiles import OwnSecrets
from llmgw.config.server import ClusterSettings
from llmgw.router.service import Router
from llmgw.store import ApiKey, Person
from tests.accounting.principals import principal


async def test_a_request_refused_before_the_engine_is_counted_under_its_keys_person(store):
    await store.add_person(Person(id="usr_ada", email="ada@example.com", name="Ada"))
    where = await store.ensure_project("Acme", "ml", "chat")
    await store.add_key(ApiKey(id="key_ada", name="ada's", project_id=where.project.id,
                               digest=b"a" * 32, prefix="sk-llmgw-a", person_id="usr_ada"))
    router = Router(store, ClusterSettings, CollectorRegistry(), own_secrets=OwnSecrets())

    router.refused_early("req_1", await principal(store, key_id="key_ada"), "chat", 429, "rate_limited")
    await router.usage.flush()

    row = await store.usage_by_id("req_1")
    assert row is not None and row.person_id == "usr_ada" and row.status == 429
    days = await store.usage_by_day(0, person_id="usr_ada")
    assert [(d.requests, d.errors) for d in days] == [(1, 1)]
