"""What the router and the accounts tell the webhooks: a key revoked or expired, a guardrail's block."""

from __future__ import annotations

import dataclasses
import time

from prometheus_client import CollectorRegistry

from llmgw.account import Accounts, Actor
from llmgw.config.keyfiles import OwnSecrets
from llmgw.config.server import ClusterSettings
from llmgw.events import Events
from llmgw.guard.decisions import Decisions
from llmgw.router.service import Router
from tests.accounting.principals import principal


def _bus() -> tuple[Events, list]:
    events, told = Events(), []
    events.subscribe(told.append)
    return events, told


async def test_a_revoked_key_is_told_once_with_who_revoked_it_and_never_its_secret(store):
    events, told = _bus()
    key = await principal(store, key="ci")
    accounts = Accounts(store, events)

    await accounts.revoke_key(Actor("root", "cli"), key.key.id)
    await accounts.revoke_key(Actor("root", "cli"), key.key.id)  # already revoked: nothing new

    assert [(e.kind, e.subject) for e in told] == [("key_revoked", key.key.id)]
    assert told[0].fields == {"key_id": key.key.id, "key_name": "ci", "project": "Acme/ml/chat",
                              "by": "root", "via": "cli", "org_id": key.path.org.id, "team_id": key.path.team.id}


async def test_an_expired_key_used_is_told_once_for_the_key(store):
    events, told = _bus()
    router = Router(store, ClusterSettings, CollectorRegistry(), own_secrets=OwnSecrets(), events=events)
    key = await principal(store, key="old")
    now = time.time()
    expired = dataclasses.replace(key, key=dataclasses.replace(key.key, expires_at=now - 5))

    router.key_refused(expired, expired.refusal(now), now)
    router.key_refused(expired, expired.refusal(now), now)
    router.key_refused(key, "this API key was revoked", now)  # not expired: not this event

    assert [(e.kind, e.once) for e in told] == [("key_expired", f"key_expired:{key.key.id}")]
    assert told[0].fields["key_name"] == "old" and told[0].fields["expired_at"] == now - 5


async def test_a_guardrail_block_is_told_with_policies_and_rules_never_the_text(store):
    events, told = _bus()
    router = Router(store, ClusterSettings, CollectorRegistry(), own_secrets=OwnSecrets(), events=events)
    key = await principal(store)
    decisions = Decisions()
    decisions.add("pii:email", "redact", "input")
    decisions.add("secrets:github", "block", "input")

    router.guard_blocked(key, ("strict",), decisions.items)
    router.guard_blocked(key, ("strict",), decisions.items)  # the same project within the hour: held back
    router.guard_blocked(key, ("strict",), [d for d in decisions.items if d.action != "block"])

    assert [(e.kind, e.subject) for e in told] == [("guardrail_blocked", key.path.project.id)]
    assert told[0].fields == {"project": "Acme/ml/chat", "project_id": key.path.project.id, "key_id": key.key.id,
                              "policies": ["strict"], "rules": ["secrets:github"], "direction": "input",
                              "blocks": 1, "org_id": key.path.org.id, "team_id": key.path.team.id}


async def test_the_embedding_budget_set_in_the_settings_is_the_one_a_question_waits(store):
    from llmgw.config.router import CacheSettings, RouterSettings
    from llmgw.config.types import Duration

    def with_budget(span: str) -> ClusterSettings:
        return ClusterSettings(router=RouterSettings(cache=CacheSettings(embedding_budget=Duration(span))))

    router = Router(store, lambda: with_budget("5s"), CollectorRegistry(), own_secrets=OwnSecrets())
    assert router.embedding_budget == 5.0
    router.apply(with_budget("750ms"))  # `llmgw ctl config set router.cache.embedding_budget 750ms`
    assert router.embedding_budget == 0.75
