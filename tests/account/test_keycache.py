"""The key cache: one store read however many requests miss one key at once."""

from __future__ import annotations

import asyncio
import time

from llmgw.account.keycache import KeyCache
from llmgw.account.keys import new_secret
from llmgw.account.service import Accounts, Actor
from llmgw.account.throttle import UnknownKeyThrottle

ME = Actor("test", "cli")


async def test_many_requests_missing_one_key_share_one_store_read(store):
    _, secret = await Accounts(store).create_key(ME, name="k", project="Demo/dev/app", create=True)
    cache = KeyCache(store, ttl=lambda: 60)
    found = await asyncio.gather(*(cache.lookup(secret) for _ in range(200)))
    assert all(p is not None and p.path.project.name == "app" for p in found)
    assert cache.store_reads == 1


async def test_an_unknown_key_is_remembered_so_retries_cost_no_store_read(store):
    cache = KeyCache(store, ttl=lambda: 60)
    wrong = new_secret()
    results = await asyncio.gather(*(cache.lookup(wrong) for _ in range(50)))
    assert results == [None] * 50
    assert await cache.lookup(wrong) is None
    assert cache.store_reads == 1


async def test_a_key_revoked_here_is_refused_on_the_next_lookup(store):
    accounts = Accounts(store)
    view, secret = await accounts.create_key(ME, name="k", project="Demo/dev/app", create=True)
    cache = KeyCache(store, ttl=lambda: 600)
    assert (await cache.lookup(secret)).refusal(time.time()) is None
    await accounts.revoke_key(ME, view["id"])
    cache.invalidate(view["id"])
    assert (await cache.lookup(secret)).refusal(time.time()) == "this API key was revoked"


async def test_a_cached_key_carries_the_limits_of_every_level_above_it(store):
    accounts = Accounts(store)
    view, secret = await accounts.create_key(ME, name="k", project="Acme/ml/chat", create=True)
    await accounts.set_limits(ME, "org", "Acme", {"rpm": 1000, "models": ["a", "b", "c"]})
    await accounts.set_limits(ME, "team", "Acme/ml", {"rpm": 300, "tpm": 50_000})
    await accounts.set_limits(ME, "key", view["id"], {"models": ["b"], "budget_micros": 2_000_000})
    principal = await KeyCache(store, ttl=lambda: 60).lookup(secret)
    assert principal.limits.rpm == 300 and principal.limits.rpm_from == "team"
    assert principal.limits.tpm == 50_000
    assert principal.limits.allows_model("b") and not principal.limits.allows_model("a")
    assert [(b.scope, b.micros, b.period) for b in principal.limits.budgets] == [("key", 2_000_000, "month")]


def test_an_address_trying_unknown_keys_is_throttled_for_the_rest_of_the_minute():
    throttle = UnknownKeyThrottle(lambda: 3)
    for _ in range(3):
        assert throttle.throttled("10.1.1.1", now=100) == 0
        throttle.failed("10.1.1.1", now=100)
    assert throttle.throttled("10.1.1.1", now=110) == 50
    assert throttle.throttled("10.2.2.2", now=110) == 0
    assert throttle.throttled("10.1.1.1", now=161) == 0


async def test_a_key_in_use_is_read_again_in_the_background_before_its_entry_runs_out(store):
    accounts = Accounts(store)
    view, secret = await accounts.create_key(ME, name="k", project="Demo/dev/app", create=True)
    ttl = {"s": 10.0}
    cache = KeyCache(store, ttl=lambda: ttl["s"])
    assert (await cache.lookup(secret)).refusal(time.time()) is None
    # Revoked on another control plane: this cache is not told.
    await accounts.revoke_key(ME, view["id"])
    ttl["s"] = 100.0  # the entry (10 s left) is now in the last fifth of a TTL
    served = await cache.lookup(secret)
    assert served.refusal(time.time()) is None  # from memory, without waiting for the store
    await asyncio.sleep(0)  # the background read
    for _ in range(100):
        if cache.store_reads == 2 and not cache._refreshing:
            break
        await asyncio.sleep(0.01)
    assert cache.store_reads == 2
    assert (await cache.lookup(secret)).refusal(time.time()) == "this API key was revoked"
    assert cache.store_reads == 2


async def test_a_throttled_addresss_lookups_wait_in_one_line_and_leave_no_lock_behind():
    throttle = UnknownKeyThrottle(lambda: 1)
    order: list[str] = []

    async def look(name: str) -> None:
        async with throttle.in_line("10.1.1.1"):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    await asyncio.gather(look("a"), look("b"), look("c"))
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert throttle.waiting("10.1.1.1") == 0 and not throttle._lines


async def test_a_key_memory_knows_is_remembered_without_the_store(store):
    accounts = Accounts(store)
    _, secret = await accounts.create_key(ME, name="k", project="Demo/dev/app", create=True)
    cache = KeyCache(store, ttl=lambda: 60.0)
    made_up = "sk-llmgw-" + "x" * 43
    assert not cache.remembers(secret) and not cache.remembers(made_up)
    await cache.lookup(secret)
    await cache.lookup(made_up)
    assert cache.remembers(secret) and cache.remembers(made_up)
