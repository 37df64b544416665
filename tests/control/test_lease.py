"""Leadership rules, on real stores: who leads, when a standby takes over, and what store loss does."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.control.lease import LeaseKeeper
from llmgw.store import open_store


def keeper(store, name: str, ttl: float) -> LeaseKeeper:
    return LeaseKeeper(store, f"{name}#test", f"http://{name}:8080", ttl=lambda: ttl)


async def test_the_first_control_plane_on_a_new_store_leads_and_the_second_stands_by(store):
    a, b = keeper(store, "a", 10), keeper(store, "b", 10)
    await a.round()
    await b.round()
    assert a.leading and not b.leading
    assert b.state.lease.holder == "a#test" and b.state.lease.address == "http://a:8080"


async def test_a_standby_takes_a_lapsed_lease_with_a_new_epoch(store):
    a, b = keeper(store, "a", 0.5), keeper(store, "b", 0.5)
    await a.round()
    await b.round()
    assert not b.leading
    await asyncio.sleep(0.7)  # a stops renewing, as a killed process would
    await b.round()
    assert b.leading
    assert b.state.lease.epoch == a.state.lease.epoch + 1


async def test_a_leader_that_stops_gives_the_lease_up_for_a_standby_at_once(store):
    a, b = keeper(store, "a", 30), keeper(store, "b", 30)
    await a.round()
    await a.stop(release=True)
    assert not a.leading
    await b.round()
    assert b.leading


@pytest.fixture
async def pg_store(postgres_cluster):
    store = await open_store(postgres_cluster.create_database())
    yield store
    if not postgres_cluster.running():
        postgres_cluster.start()
    await store.close()


async def test_a_leader_cut_off_from_the_store_stops_leading_before_its_lease_lapses(pg_store, postgres_cluster):
    a = keeper(pg_store, "a", 1.0)
    await a.round()
    assert a.leading
    postgres_cluster.stop()
    await asyncio.sleep(1.0)  # the behaviour under test: the lease's 1 s running out while the store is away
    await a.round()
    assert not a.state.store_ok
    assert not a.leading


async def test_a_standby_that_lost_the_store_leaves_the_lease_alone_for_one_round(pg_store, postgres_cluster):
    a, b = keeper(pg_store, "a", 1.0), keeper(pg_store, "b", 1.0)
    await a.round()
    await b.round()
    postgres_cluster.stop()
    await b.round()
    assert not b.state.store_ok
    await asyncio.sleep(1.2)  # a's lease lapses in the store while nobody can reach it
    postgres_cluster.start()
    await b.round()  # the store answers again: b only looks
    assert b.state.store_ok and not b.leading
    assert b.state.lease.holder == "a#test"
    await a.round()  # a, back too, renews its own lease
    await b.round()
    assert a.leading and not b.leading
