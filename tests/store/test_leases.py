"""Leadership: one holder of a lease at a time, by the database's clock."""

from __future__ import annotations

import asyncio


async def test_the_first_to_try_takes_a_free_lease_at_epoch_one(store):
    lease = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=10)

    assert (lease.holder, lease.address, lease.epoch) == ("cp-1", "10.0.0.1:7443", 1)
    assert await store.get_lease("leader") == lease


async def test_the_holder_renews_its_lease_without_a_new_epoch(store):
    first = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=5)
    renewed = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=10)

    assert renewed.holder == "cp-1" and renewed.epoch == 1
    assert renewed.expires_at >= first.expires_at + 4.9


async def test_a_lease_held_by_another_is_left_alone_until_it_expires(store):
    held = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=0.5)

    refused = await store.try_lease("leader", "cp-2", "10.0.0.2:7443", ttl=10)
    assert refused == held

    await asyncio.sleep(0.7)  # the behaviour under test: the lease's 0.5 s running out
    taken = await store.try_lease("leader", "cp-2", "10.0.0.2:7443", ttl=10)
    assert (taken.holder, taken.address, taken.epoch) == ("cp-2", "10.0.0.2:7443", 2)

    late = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=10)
    assert late.holder == "cp-2" and late.epoch == 2


async def test_of_many_control_planes_trying_at_once_exactly_one_leads(store):
    results = await asyncio.gather(
        *(store.try_lease("leader", f"cp-{n}", f"10.0.0.{n}:7443", ttl=10) for n in range(10))
    )

    leaders = {r.holder for r in results}
    assert len(leaders) == 1
    assert {r.epoch for r in results} == {1}
    assert (await store.get_lease("leader")).holder in leaders


async def test_a_released_lease_can_be_taken_at_once(store):
    await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=30)
    await store.release_lease("leader", "cp-1")

    taken = await store.try_lease("leader", "cp-2", "10.0.0.2:7443", ttl=30)

    assert (taken.holder, taken.epoch) == ("cp-2", 2)


async def test_only_the_holder_can_release_a_lease(store):
    held = await store.try_lease("leader", "cp-1", "10.0.0.1:7443", ttl=30)
    await store.release_lease("leader", "cp-2")
    await store.release_lease("no-such-lease", "cp-1")

    assert await store.get_lease("leader") == held
    assert (await store.try_lease("leader", "cp-2", "10.0.0.2:7443", ttl=30)).holder == "cp-1"


async def test_leases_of_different_names_are_independent(store):
    a = await store.try_lease("leader", "cp-1", "a", ttl=30)
    b = await store.try_lease("reconciler", "cp-2", "b", ttl=30)

    assert (a.holder, b.holder) == ("cp-1", "cp-2")
    assert await store.get_lease("nothing") is None


async def test_a_lease_runs_out_by_the_stores_clock(store):
    # Two control planes must agree on expiry whatever their own clocks say,
    # so the times are the database's: a lease expires ttl after it was taken.
    before = await store.try_lease("probe", "cp-1", "a", ttl=0)
    lease = await store.try_lease("leader", "cp-1", "a", ttl=10)
    assert 9.5 < lease.expires_at - before.expires_at < 10.5
